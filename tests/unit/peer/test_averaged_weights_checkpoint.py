"""Checkpoints carry the averaged weights as `average.*` and a resumed peer continues them; a peer
that does not gossip keeps the same average by the same rule (peer.local.averaged_weights)."""

from __future__ import annotations

import pytest
import torch

from peer.core.average import SwarmAverage
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.view import MixView
from peer.local.averaged_weights import SoloAverage, checkpoint_tensors, restore
from peer.local.checkpoint import AVERAGE_PREFIX
from peer.trainer import StepStats, split_flat
from protocol import Identity, flat_model_spec

SPEC = {"a.weight": ((2, 3), "float32"), "b.bias": ((4,), "float32")}


def test_split_flat_gives_named_copies_of_each_parameter() -> None:
    flat = torch.arange(10, dtype=torch.float32)
    parts = split_flat(flat, SPEC, "p.")
    assert list(parts) == ["p.a.weight", "p.b.bias"]
    assert torch.equal(parts["p.a.weight"], torch.arange(6.0).reshape(2, 3))
    parts["p.b.bias"].zero_()
    assert flat[6:].sum() > 0  # copies, not views (safetensors refuses shared storage)
    with pytest.raises(ValueError, match="10 values|need 10"):
        split_flat(torch.zeros(9), SPEC)


def test_checkpoint_tensors_round_trip_through_restore() -> None:
    avg = SwarmAverage(GossipConfig())
    assert checkpoint_tensors(avg, SPEC) == ({}, {})
    avg.update(torch.arange(10.0), MixView(torch.arange(10.0)), 12)
    tensors, meta = checkpoint_tensors(avg, SPEC)
    assert set(tensors) == {AVERAGE_PREFIX + "a.weight", AVERAGE_PREFIX + "b.bias"} and meta["average"]["step"] == 12
    other = SwarmAverage(GossipConfig())
    assert restore(other, SPEC, tensors, meta)
    assert torch.equal(other.weights()[0], torch.arange(10.0)) and other.weights()[1] == 12


def test_restore_refuses_what_does_not_fit_and_changes_nothing() -> None:
    avg = SwarmAverage(GossipConfig())
    tensors = {AVERAGE_PREFIX + "a.weight": torch.zeros(3, 2), AVERAGE_PREFIX + "b.bias": torch.zeros(4)}
    assert not restore(avg, SPEC, tensors, {"average": {"step": 3}})  # wrong shape
    assert not restore(avg, SPEC, {}, {"average": {"step": 3}})  # none saved
    assert not restore(avg, SPEC, tensors, {"average": {"step": "3"}})  # malformed meta
    assert avg.weights() is None


class _Counter:
    def __init__(self) -> None:
        self.x = torch.zeros(10)

    def get_flat_params(self) -> torch.Tensor:
        return self.x.clone()


def test_a_solo_peer_keeps_the_same_average_every_gossip_period() -> None:
    solo, trainer = SoloAverage(GossipConfig(gossip_every=4), SPEC), _Counter()
    for step in range(1, 9):
        trainer.x += 1
        solo(trainer, StepStats(step=step, loss=0.0, samples=1))
    node = GossipNode(GossipConfig(compression="identity"), Identity.generate(b"\x05" * 32), flat_model_spec(10),
                      torch.zeros(10), now=100.0)
    node.publish(torch.full((10,), 4.0), 4, 101.0)
    node.publish(torch.full((10,), 8.0), 8, 102.0)
    assert solo.average.weights()[1] == 8
    assert torch.allclose(solo.average.weights()[0], node.average.weights()[0])
