"""Where a node holds its copies (`peer.core.placement`): on the trainer's GPU only when asked, within
the budget, with as many neighbour copies as the budget holds; on the CPU, with a line that says
why, in every other case."""

from __future__ import annotations

import dataclasses

import pytest

from peer.core.gossip_config import GossipConfig
from peer.core.placement import MIN_DEVICE_NEIGHBOURS, STAGE_BYTES, place_node

N = 800_000_000
"""The `800m` preset's size, about."""
OWN = 2 + 2 + 3 + STAGE_BYTES
"""Bytes a parameter the node itself takes with the defaults: bfloat16 x̂ and hand-over, the packed
average, a stage's temporaries."""
GIB = 1 << 30


def adam(**settings) -> GossipConfig:
    """The settings an Adam trainer's peer runs with (no partner steps: `GossipConfig.for_trainer`)."""
    return GossipConfig(**settings).for_trainer(additive_steps=False)


def test_a_cpu_trainer_keeps_the_node_on_the_cpu_and_says_nothing():
    placed = place_node(adam(device_budget_gib=40), N, "cpu", add_in_place=True)
    assert (placed.device, placed.max_neighbours, placed.reason, placed.on_device) == ("cpu", 8, "", False)


def test_without_a_budget_a_gpu_peer_gossips_on_the_cpu_and_is_told_how_to_change_it():
    placed = place_node(adam(), N, "cuda:0", add_in_place=True)
    assert placed.device == "cpu" and placed.max_neighbours == 8
    assert "device_budget_gib is 0" in placed.reason and "cuda:0" in placed.reason


@pytest.mark.parametrize("neighbours", [2, 3, 8])
def test_the_budget_sets_the_neighbour_copies_held_on_the_gpu(neighbours):
    budget = (OWN + 2 * neighbours) * N / GIB + 0.01
    placed = place_node(adam(device_budget_gib=budget), N, "cuda:0", add_in_place=True)
    assert placed.device == "cuda:0" and placed.on_device
    assert placed.max_neighbours == neighbours
    assert f"{neighbours} neighbour copies" in placed.reason


def test_a_large_budget_keeps_max_neighbours():
    placed = place_node(adam(device_budget_gib=1000, max_neighbours=5), N, "cuda:1", add_in_place=True)
    assert (placed.device, placed.max_neighbours) == ("cuda:1", 5)


def test_a_budget_short_of_two_neighbours_stays_on_the_cpu_and_names_what_would_do():
    budget = (OWN + 2 * (MIN_DEVICE_NEIGHBOURS - 1)) * N / GIB + 0.01
    placed = place_node(adam(device_budget_gib=budget), N, "cuda:0", add_in_place=True)
    assert placed.device == "cpu" and placed.max_neighbours == 8
    least = (OWN + 2 * MIN_DEVICE_NEIGHBOURS) * N / GIB
    assert "holds 1 neighbour copy;" in placed.reason and f"{least:.1f} GiB holds 2" in placed.reason


@pytest.mark.parametrize("change,why", [
    (dict(copy_dtype="float32"), "float32 parameters"),
    (dict(handover_dtype="float32"), "float32 parameters"),
    (dict(partner_steps=0.7), "float32 parameters"),
])
def test_a_node_that_is_handed_float32_stays_on_the_cpu(change, why):
    cfg = dataclasses.replace(adam(device_budget_gib=1000), **change)
    placed = place_node(cfg, N, "cuda:0", add_in_place=True)
    assert placed.device == "cpu" and why in placed.reason


def test_a_trainer_that_cannot_add_in_place_or_an_mps_one_stays_on_the_cpu():
    cfg = adam(device_budget_gib=1000)
    assert "add a mix in place" in place_node(cfg, N, "cuda:0", add_in_place=False).reason
    mps = place_node(cfg, N, "mps", add_in_place=True)
    assert mps.device == "cpu" and "not mps" in mps.reason


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_bad_budget_is_refused_with_its_fix(bad):
    with pytest.raises(ValueError, match="device_budget_gib must be finite and >= 0"):
        GossipConfig(device_budget_gib=bad)
