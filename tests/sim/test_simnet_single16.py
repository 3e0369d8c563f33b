"""16 gossip peers against one process holding all their samples (the shipped `single16`): the
peers' mean loss reaches the process's final loss within D / 4 on seed 0 with the defaults, and
the same rule without partner steps (the control) does not. Seeds 0-4 in docs/simnet.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import simnet_seeds  # noqa: E402

FIGURES = {f.name: f for f in simnet_seeds.FIGURES["single16"]}


@pytest.fixture(scope="module")
def seed0() -> dict:
    data = simnet_seeds.scenario_table("single16", runs=["gossip", "no_partner_steps"])
    summary, _timing, _records = simnet_seeds.run_seed("single16", 0, lambda line: None, data)
    return summary


def test_sixteen_peers_reach_the_single_process_final_loss_in_a_quarter_of_its_time(seed0):
    gossip = FIGURES["gossip: time to target / D"]
    assert gossip.holds(gossip.read(seed0, {})), seed0["runs"]["gossip"]


def test_without_partner_steps_sixteen_peers_do_not(seed0):
    runs = seed0["runs"]
    now, without = runs["gossip"]["time_to_target_s"], runs["no_partner_steps"]["time_to_target_s"]
    assert without is None or without > 1.5 * now, (now, without)
