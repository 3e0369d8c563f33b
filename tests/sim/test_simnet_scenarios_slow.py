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


@pytest.mark.timeout(1500)  # 256 peers for 20 simulated s: about 10 CPU-minutes here
def test_scale_events_per_peer_step_do_not_grow():
    """The `scale` scenario's claim, counted rather than timed (its timing line measures the CPU):
    past the first 10 simulated seconds (the discovery burst), the simulator's events per peer-step
    at 256 peers stay within 1.3× those at 16 (each event touches one peer and its few neighbours).
    Measured: 6.93 at 16 peers, 6.41 at 256."""
    import copy
    import tomllib

    from simnet.runs.config import merge, world_from_dict
    from simnet.runs.scenario import read_scenario_text
    from simnet.runs.swarm import GossipSim

    data = tomllib.loads(read_scenario_text("scale")[0])
    per_step = {}
    for run_table in data["runs"]:
        world = merge(copy.deepcopy(data["world"]), copy.deepcopy(run_table.get("set", {})))
        sim = GossipSim(world_from_dict(world), seed=0)
        sim.advance_to(float(world["cost_warmup_s"]))
        events, steps = sim.sched.events_run, sim.peer_steps
        sim.advance_to(float(world["duration_s"]))
        per_step[run_table["name"]] = (sim.sched.events_run - events) / (sim.peer_steps - steps)
    assert per_step["n256"] <= 1.3 * per_step["n16"], per_step


def test_tts_tiny_swarm_trains():
    pytest.importorskip("gossip_tts.apps.simnet_models")
    s = quiet("tts")
    gossip = s["runs"]["gossip"]
    assert gossip["peer_steps"] > 0 and gossip["totals"]["exchanges_ok"] > 0
    assert float(gossip["final_loss"]) < 2.5  # ~2.48 at initialisation
