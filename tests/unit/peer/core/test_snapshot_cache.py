"""Answers carry one cached signed snapshot, not a fresh one each time."""

from __future__ import annotations

import torch

import peer.core.snapshots as snapshots_module
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.snapshots import SNAPSHOT_REUSE_S
from protocol import Identity, unpack_bundle
from protocol.limits import Limits

NOW = 1_000_000.0
SPEC = {"w": ((64,), "float32")}


def node(i: int) -> GossipNode:
    return GossipNode(GossipConfig(swarm="cache"), Identity.generate(bytes([i]) * 32), SPEC, torch.randn(64), now=NOW)


def snapshot_in_answer(victim: GossipNode, asker: GossipNode, now: float) -> bytes:
    """A first contact (answered with a ticket alone), then the ticketed request whose answer
    carries the snapshot (the asker's address verified, each asker at its own address)."""
    key, verified, address = victim.identity.public_key, {asker.identity.public_key}, asker.peer_id[:8]
    reply, result = victim.handle_request(asker.build_request(None, now), now, address=address, verified=verified)
    assert not result.accepted and len(unpack_bundle(reply, Limits())) == 1
    asker.handle_response(reply, now)
    reply, result = victim.handle_request(asker.build_request(key, now), now, address=address, verified=verified)
    frames = unpack_bundle(reply, Limits())
    assert result.accepted and len(frames) == 2  # the control frame and our snapshot
    return frames[1]


def test_first_contacts_share_one_signed_snapshot_until_a_publish_or_the_reuse_limit(monkeypatch):
    victim = node(1)
    built = []
    real = snapshots_module.make_snapshot_frame
    monkeypatch.setattr(snapshots_module, "make_snapshot_frame", 
                        lambda *a, **k: (a[0] is victim.identity and built.append(1)) or real(*a, **k))
    first = [snapshot_in_answer(victim, node(10 + i), NOW + i) for i in range(5)]
    assert len(built) == 1 and len(set(first)) == 1  # five askers, one compression and signature
    victim.publish(torch.randn(64), 4, NOW + 6)
    after_publish = snapshot_in_answer(victim, node(20), NOW + 7)
    assert len(built) == 2 and after_publish != first[0]
    snapshot_in_answer(victim, node(21), NOW + 7 + SNAPSHOT_REUSE_S + 1)
    assert len(built) == 3  # rebuilt: an old stamp would soon fall outside the receivers' skew limit


def test_a_cached_snapshot_is_released_when_our_copy_moves_on():
    """The cached frame is the model's size: kept past a publish or an adoption it could never be
    sent again, and a node that answered one newcomer would hold it for good."""
    victim = node(1)
    frame = snapshot_in_answer(victim, node(10), NOW)
    assert victim.snapshot_cached and len(frame) > 64 * 2
    victim.publish(torch.randn(64), 4, NOW + 1)
    assert not victim.snapshot_cached
    snapshot_in_answer(victim, node(11), NOW + 2)
    assert victim.snapshot_cached
    victim.adopt(torch.randn(64), 9)
    assert not victim.snapshot_cached
