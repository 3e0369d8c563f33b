"""The outbox keeps its newest few frames whatever their size (peer/core/outbox.py): an update of
a large model can outgrow the byte bound, and a partner one publish behind must still get the
update rather than the whole model."""

from __future__ import annotations

import torch

from peer.core.gossip_config import OUTBOX_FLOOR_BYTES, GossipConfig
from peer.core.node import GossipNode
from peer.core.outbox import Outbox
from peer.metrics import Metrics
from protocol import Identity
from tests.unit.exchange_helpers import push


def test_the_byte_bound_drops_old_frames_but_never_the_newest_few():
    box = Outbox(max_bytes=10, min_frames=2)
    for seq in range(1, 5):
        box.append(seq, b"x" * 8)  # every frame alone is near the bound, two pass it
    assert len(box) == 2 and box.nbytes == 16
    assert box.since(2) == [b"x" * 8] * 2 and box.since(1) is None


def test_without_a_floor_a_frame_larger_than_the_bound_is_not_kept():
    box = Outbox(max_bytes=10)
    box.append(1, b"x" * 11)
    assert len(box) == 0 and box.since(0) is None


def _node(seed: int, metrics: Metrics | None = None, **cfg) -> GossipNode:
    n = 4096
    return GossipNode(GossipConfig(swarm="t", partner_steps=0.0, **cfg), Identity.generate(bytes([seed]) * 32),
                      {"w": ((n,), "float32")}, torch.zeros(n), now=0.0, metrics=metrics)


def test_a_partner_one_publish_behind_gets_the_update_when_one_update_outgrows_the_outbox_bytes():
    """outbox_bytes 1: no update frame fits. With the floor, the partner that holds our copy up to
    the previous publish is sent the one update it lacks; without it, a snapshot."""
    for min_frames, snapshots in ((2, 0), (0, 1)):
        metrics = Metrics(process=False)
        a, b = _node(1, metrics, outbox_bytes=1, outbox_min_frames=min_frames), _node(2)
        a.publish(torch.randn(4096), 1, now=1.0)
        push(a, b, now=1.0)  # b now holds a's copy (a snapshot: a new pair)
        a.publish(torch.randn(4096), 2, now=2.0)
        sent = metrics.total("snapshots_sent_total")
        push(a, b, now=2.0)
        assert b.neighbours[a.identity.public_key].copy.seq == 2
        assert metrics.total("snapshots_sent_total") - sent == snapshots


def test_the_outbox_is_bounded_by_a_share_of_the_model_as_well_as_in_bytes():
    """A fixed 256 MiB held over two float32 copies' worth of a 30M model: the bound follows the
    model (`GossipConfig.outbox_copies`) up to `outbox_bytes`, and never below a floor that keeps
    a tiny model's gap fills."""
    cfg = GossipConfig()
    assert cfg.outbox_bound(30_000_000) == 30_000_000  # a quarter of 120 MB
    assert cfg.outbox_bound(800_000_000) == cfg.outbox_bytes
    assert cfg.outbox_bound(4096) == OUTBOX_FLOOR_BYTES
    node = _node(1, outbox_copies=0.25)
    assert node.outbox.max_bytes == OUTBOX_FLOOR_BYTES and node.outbox.min_frames == cfg.outbox_min_frames
    assert _node(1, outbox_bytes=1000).outbox.max_bytes == 1000
