"""Transfers get deadlines from what they may carry: a snapshot of a 100M-parameter model cannot
cross in the fixed timeout a hello gets (peer/core/config.py, peer/core/snapshots.py)."""

from __future__ import annotations

import pytest
import torch

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.snapshots import snapshot_bytes
from protocol import Identity

PRESET_100M = 107_505_536


def test_a_hello_keeps_the_fixed_timeout_and_a_snapshot_gets_time_for_its_bytes():
    cfg = SessionConfig()
    assert cfg.transfer_deadline_s(0) == cfg.request_timeout_s
    snapshot = snapshot_bytes(PRESET_100M, with_steps=False)
    assert snapshot > 430e6
    # at the floor rate, the 100m snapshot alone needs minutes: the fixed 30 s would cut it
    assert cfg.transfer_deadline_s(snapshot) == pytest.approx(cfg.request_timeout_s + snapshot / cfg.min_transfer_rate)
    assert cfg.transfer_deadline_s(snapshot) > 200
    # an exchange may push our snapshot and carry theirs back
    assert cfg.exchange_deadline_s(snapshot) == pytest.approx(cfg.transfer_deadline_s(2 * snapshot))


def test_a_faster_floor_shortens_every_transfer_and_a_bad_one_is_refused():
    assert SessionConfig(min_transfer_rate=4e6).transfer_deadline_s(400_000_000) == pytest.approx(130.0)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="min_transfer_rate"):
            SessionConfig(min_transfer_rate=bad)


def test_a_node_names_its_largest_honest_frame_with_or_without_partner_steps():
    n = 1000

    def node(partner_steps: float) -> GossipNode:
        return GossipNode(GossipConfig(swarm="t", partner_steps=partner_steps), Identity.generate(b"\x05" * 32),
                          {"w": ((n,), "float32")}, torch.zeros(n), now=0.0)

    alone, with_steps = node(0.0).snapshot_bytes, node(0.7).snapshot_bytes
    assert alone == snapshot_bytes(n, with_steps=False) and alone >= 4 * n
    assert with_steps == snapshot_bytes(n, with_steps=True) and with_steps - alone == 4 * n
