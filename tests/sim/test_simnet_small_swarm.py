"""Two or three peers, one of them steering: the radius before enough neighbours are known.

With fewer than `clip_min_neighbours` (3) neighbours the clip radius falls back to a bound from
how far the peer's own copy moves per publish (`NeighbourRadius`). A steering liar (a point
1.25x farther at every publish) beside one honest peer, or alone with its victim, must cost the
victim no more than 5% against the same world with the liar cut off; and the bound must not cost
an honest pair its gain over the same two peers cut apart (the control that must do worse).
"""

import pytest

from conftest import simulate
from test_simnet_byzantine import WORLD

STEER = {"kind": "steer", "peers": [0], "scale": 1.0, "growth": 1.25}
FOR_GOOD = {"start_s": 0.0, "end_s": 1000.0}


@pytest.mark.parametrize("n_peers", [2, 3])
def test_a_steering_neighbour_costs_a_small_swarm_no_more_than_its_absence(n_peers):
    world = {**WORLD, "n_peers": n_peers, "duration_s": 40.0, "attack": STEER}
    runs = [{"name": "steer"}, {"name": "cut", "set": {"partitions": [{**FOR_GOOD, "groups": [[0]]}]}}]
    s = simulate(world, runs, [["steer", "cut"]])
    # Measured (40 s, seeds 0-2): 2 peers 0.990 / 0.999 / 0.987 (the cap alone: 0.990 / 1.013 / 0.972);
    # 3 peers, default gossip settings, 0.996-1.021 with the cap alone.
    assert s["ratios"]["steer/cut"]["final_loss"] <= 1.05, s["ratios"]["steer/cut"]
    assert s["runs"]["steer"]["diverged_peers"] == 0


def test_an_honest_pair_keeps_its_gain_over_training_alone():
    world = {**WORLD, "n_peers": 2, "duration_s": 40.0, "attack": {"kind": "none"}}
    runs = [{"name": "pair"}, {"name": "alone", "set": {"partitions": [{**FOR_GOOD, "groups": [[0], [1]]}]}},
            {"name": "pair_cap_only", "set": {"gossip": {**WORLD["gossip"], "clip_own_multiplier": 1e12}}}]
    s = simulate(world, runs, [["pair", "alone"], ["pair", "pair_cap_only"]])
    # Measured (40 s, seeds 0-2): pair/alone 0.864 / 0.880 / 0.889, the same as with the cap alone
    # (the bound never shortens an honest pull here); with clip_own_multiplier 2 the pair lost most
    # of its gain (0.78 against 0.70 with the cap alone, seed 0).
    assert s["ratios"]["pair/alone"]["final_loss"] <= 0.95, s["ratios"]["pair/alone"]
    assert s["ratios"]["pair/pair_cap_only"]["final_loss"] <= 1.02, s["ratios"]["pair/pair_cap_only"]
