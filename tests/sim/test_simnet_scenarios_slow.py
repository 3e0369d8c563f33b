"""The built-in scenarios at full size, with the headline numbers the docs quote.

Slow (minutes on a 2-core machine): run with `pytest -m slow tests/sim`.
"""

import pytest

from simnet import load_scenario, run

pytestmark = pytest.mark.slow


def quiet(name: str, **kw) -> dict:
    return run(load_scenario(name, **kw), emit=lambda s: None, echo=lambda s: None)


def test_stragglers_time_to_target():
    s = quiet("stragglers")
    assert s["ratios"]["gossip/allreduce"]["time_to_target"] <= 1 / 3
    assert s["ratios"]["gossip/diloco"]["time_to_target"] <= 2 / 3


def test_wan_gossip_trains_through_a_partition():
    s = quiet("wan")
    assert s["ratios"]["gossip/allreduce"]["time_to_target"] < 1
    assert s["runs"]["allreduce"]["totals"]["stalled_by_partition_s"] > 0


def test_churn_and_its_control():
    s = quiet("churn")
    assert s["ratios"]["churn/no_churn"]["worst_loss_ratio"] <= 1.05
    assert s["ratios"]["no_fetch/no_churn"]["worst_loss_ratio"] > 1.05


def test_byzantine_clipping_and_its_control():
    s = quiet("byzantine")
    assert s["ratios"]["clipped/clean"]["final_loss"] <= 1.05
    assert s["runs"]["plain"]["diverged_peers"] > 0
    assert s["runs"]["nan"]["totals"]["frames_refused"]["non_finite"] > 0


def test_scale_cost_per_peer_step_does_not_grow():
    s = quiet("scale")
    assert s["timing"]["cost_ratio"]["n256/n16"] <= 1.3


def test_tts_tiny_swarm_trains():
    pytest.importorskip("gossip_tts.apps.simnet_models")
    s = quiet("tts")
    gossip = s["runs"]["gossip"]
    assert gossip["peer_steps"] > 0 and gossip["totals"]["exchanges_ok"] > 0
    assert float(gossip["final_loss"]) < 2.5  # ~2.48 at initialisation
