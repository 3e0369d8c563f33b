"""A joiner that adopts a peer's state holds that peer's copy from it: its first exchange with it
brings updates, not a snapshot of the whole model (peer.core.state_seed)."""

from __future__ import annotations

import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.state_seed import source_of
from peer.metrics import Metrics
from protocol import Identity
from tests.unit.exchange_helpers import exchange

NOW = 1_000_000.0
DIM = 4096


def node(i: int, x: torch.Tensor, **cfg) -> GossipNode:
    cfg = GossipConfig(**{"swarm": "t", "staleness": "constant", "partner_steps": 0.0, **cfg})
    return GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), {"w": ((x.numel(),), "float32")}, x, now=NOW,
                      metrics=Metrics(process=False))


def count(n: GossipNode, name: str) -> float:
    return n.metrics.total(name)


def joined(source: GossipNode, joiner: GossipNode, copy_of_state: bool = False) -> None:
    """`joiner` reads `source`'s state and adopts it, as a driver does (the same tensor, or a copy)."""
    x, step = joiner.read_state(source.state_frame(NOW), NOW)
    joiner.adopt(x.clone() if copy_of_state else x, step)


def run_source(**cfg) -> GossipNode:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(DIM, generator=g) * 0.02
    source = node(0, x, **cfg)
    for step in range(1, 4):
        x = x - 1e-3 * torch.randn(DIM, generator=g)
        source.publish(x, step, NOW + step)
    return source


def first_exchanges(source: GossipNode, joiner: GossipNode) -> None:
    """The source publishes once more; the joiner asks twice (a first contact gets a ticket)."""
    source.publish(source.public.x_hat.float() + 1e-3, 10, NOW + 10)
    exchange(joiner, source, NOW + 10)
    exchange(joiner, source, NOW + 10)


def test_an_adopted_state_seeds_the_copy_of_its_sender_and_the_first_exchange_brings_updates():
    source = run_source()
    joiner = node(1, torch.zeros(DIM))
    joined(source, joiner)
    seeded = joiner.neighbours[source.identity.public_key].copy
    assert seeded.seq == source.public.seq and torch.equal(seeded.x_hat, source.public.x_hat)
    first_exchanges(source, joiner)
    copy = joiner.neighbours[source.identity.public_key].copy
    assert torch.equal(copy.x_hat.view(torch.int16), source.public.x_hat.view(torch.int16))
    assert count(joiner, "snapshots_received_total") == 0 and count(joiner, "updates_applied_total") == 1


def test_control_without_the_seed_the_first_exchange_brings_a_whole_snapshot():
    for source, copy_of_state in ((run_source(), True), (run_source(copy_dtype="float32"), False)):
        joiner = node(1, torch.zeros(DIM))
        joined(source, joiner, copy_of_state)  # a tensor not read here, or exact parameters: no x̂ named
        assert source.identity.public_key not in joiner.neighbours
        first_exchanges(source, joiner)
        assert count(joiner, "snapshots_received_total") == 1


def test_a_malformed_claim_seeds_nothing_and_is_still_a_state():
    ok = dict(epoch=5, copy_seq=3)
    assert source_of(ok, b"k", 1, 0.0, torch.bfloat16).seq == 3
    for bad in (dict(epoch=0, copy_seq=3), dict(epoch=5, copy_seq=-1), dict(epoch="5", copy_seq=3),
                dict(epoch=5, copy_seq=True), dict(epoch=2 ** 64, copy_seq=3), dict(epoch=5)):
        assert source_of(bad, b"k", 1, 0.0, torch.bfloat16) is None, bad


def test_a_state_stamped_after_its_arrival_seeds_a_copy_no_fresher_than_a_frame_would_be():
    """The stamp decides the seeded copy's staleness weight: one from the future is mirrored about
    its arrival, as an exchanged frame's is, instead of counting as brand new."""
    source = run_source()
    joiner = node(1, torch.zeros(DIM))
    x, step = joiner.read_state(source.state_frame(NOW + 100.0), NOW)
    joiner.adopt(x, step)
    assert joiner.neighbours[source.identity.public_key].published_at == NOW - 100.0
