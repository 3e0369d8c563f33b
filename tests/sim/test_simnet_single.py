"""8 gossip peers, each on its own simulated machine, against one process training alone.

The single process is an `allreduce` run with one peer (one real step per round, no
communication) holding the very samples of all 8 peers' shards. The target (the shipped
`single` scenario): the 8 peers' mean loss reaches the single process's final loss (its run
lasts D) within D / 3, i.e. 8 peers are worth 3 machines: seed 0 gets there with partner
steps, and not without them (`no_partner_steps`, the control; seeds 0-4 in docs/simnet/single.md).
The mixing rule reaches the target in under half the time the rule before it takes
(`gossip_before`, the control), and every link cut (`alone`) never gets there.
`single16`, the same with 16 peers, must get there within D / 4, and without partner steps does not.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from conftest import simulate

from simnet.world.models import mlp_evaluator, mlp_factory

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import simnet_seeds  # noqa: E402

FIGURES = {f.name: f for f in simnet_seeds.FIGURES["single"]}
ONE = {"n_peers": 1, "duration_s": 3.0, "eval_every_s": 1.0, "speed": {"base_step_s": 0.1},
       "model_args": {"heterogeneity": 0.0}}


@pytest.fixture(scope="module")
def seed0() -> dict:
    summary, _timing, _records = simnet_seeds.run_seed("single", 0, lambda line: None)
    return summary


def test_allreduce_with_one_peer_is_a_single_process_training_alone():
    s = simulate(ONE, [{"name": "single", "method": "allreduce"}])
    run = s["runs"]["single"]
    rounds = run["totals"]["rounds"]
    assert run["peer_steps"] == rounds and rounds in (29, 30)  # one step per 0.1 s, nothing else
    assert run["totals"]["round_comm_s"] == 0.0 and run["bytes_per_peer"] == 0.0
    trainer, evaluate = mlp_factory(0, 1, 0, heterogeneity=0.0), mlp_evaluator(1, 0, heterogeneity=0.0)
    for _ in range(rounds):
        trainer.step()
    assert run["final_loss"] == pytest.approx(evaluate(trainer.get_flat_params()), rel=1e-5)


def test_a_gossip_run_needs_two_peers():
    with pytest.raises(ValueError, match="n_peers = 1"):
        simulate(ONE, [{"name": "gossip", "method": "gossip"}])


def test_the_single_process_holds_the_very_samples_of_the_eight_shards():
    peers = [mlp_factory(i, 8, 3, heterogeneity=0.0) for i in range(8)]
    single = mlp_factory(0, 1, 3, heterogeneity=0.0, n_shards=8, held_shards=8)
    assert torch.equal(single.x, torch.cat([p.x for p in peers]))
    assert torch.equal(single.y, torch.cat([p.y for p in peers]))
    assert torch.equal(single.get_flat_params(), peers[0].get_flat_params())
    with pytest.raises(ValueError, match="held_shards"):
        mlp_factory(1, 8, 3, held_shards=8)


@pytest.mark.slow  # the built-in scenario at full size, minutes on 2 cores: run by .ci/run's slow section
def test_the_swarm_ends_at_the_single_process_loss_and_the_cut_off_control_far_above(seed0):
    runs = seed0["runs"]
    single_final = runs["single"]["final_loss"]
    assert seed0["target_loss"]["gossip"] == pytest.approx(single_final)
    assert runs["single"]["sim_time_s"] == 60.0  # the single process runs its whole D
    # Measured (seed 0): gossip 1.004, the 8-process all-reduce 0.999, every link cut 1.30.
    assert runs["gossip"]["final_loss"] / single_final < 1.01
    assert runs["allreduce"]["final_loss"] / single_final < 1.01
    assert runs["alone"]["final_loss"] / single_final > 1.15
    alone = FIGURES["alone (control, every link cut): time to target / D"]
    assert alone.holds(alone.read(seed0, {})), runs["alone"]


@pytest.mark.slow  # the built-in scenario at full size, minutes on 2 cores: run by .ci/run's slow section
def test_the_mixing_rule_gets_there_in_under_half_the_time_of_the_rule_before(seed0):
    runs, duration = seed0["runs"], seed0["runs"]["single"]["sim_time_s"]
    now, before = runs["gossip"]["time_to_target_s"], runs["gossip_before"]["time_to_target_s"]
    assert now is not None and now / duration < 0.5, runs["gossip"]
    assert before is None or now < 0.5 * before, (now, before)


@pytest.fixture(scope="module")
def seed0_of16() -> dict:
    """`single16` on seed 0, only the runs the tests below read (and the reference run)."""
    data = simnet_seeds.scenario_table("single16", runs=["gossip", "no_partner_steps"])
    summary, _timing, _records = simnet_seeds.run_seed("single16", 0, lambda line: None, data)
    return summary


@pytest.mark.slow  # the built-in scenario at full size, minutes on 2 cores: run by .ci/run's slow section
@pytest.mark.parametrize("scenario, fixture", [("single", "seed0"), ("single16", "seed0_of16")])
def test_the_peers_reach_the_single_process_final_loss_within_the_target(scenario, fixture, request):
    """8 peers within D / 3, 16 peers within D / 4."""
    summary = request.getfixturevalue(fixture)
    gossip = {f.name: f for f in simnet_seeds.FIGURES[scenario]}["gossip: time to target / D"]
    assert gossip.holds(gossip.read(summary, {})), summary["runs"]["gossip"]


@pytest.mark.slow  # the built-in scenario at full size, minutes on 2 cores: run by .ci/run's slow section
@pytest.mark.parametrize("fixture", ["seed0", "seed0_of16"])
def test_partner_steps_arrive_sooner_than_the_same_rule_without_them(fixture, request):
    """The control: without partner steps (the measured multiplier instead) seed 0 misses the target."""
    runs = request.getfixturevalue(fixture)["runs"]
    now, without = runs["gossip"]["time_to_target_s"], runs["no_partner_steps"]["time_to_target_s"]
    assert without is None or now < 0.8 * without, (now, without)


@pytest.mark.slow  # two swarms of 8 cut-off peers for 60 and 180 simulated s, ~15 s on 2 cores: run by .ci/run's slow section
def test_peers_cut_off_from_each_other_cost_events_in_proportion_to_simulated_time():
    """Every link cut (`single`'s `alone` control) once spun: its session's timers rescheduled
    themselves without simulated time passing, and at 180 s a run had used 7 CPU-minutes without
    ending. The simulator's events per peer per simulated second stay those of its steps and
    timers (a step every 0.1 s, hellos, retries), the same at 180 s as at 60 s."""
    from simnet.runs.config import world_from_dict
    from simnet.runs.swarm import GossipSim

    rates = []
    for duration in (60.0, 180.0):
        world = world_from_dict({"n_peers": 8, "model": "mlp", "duration_s": duration, "gossip": {"gossip_every": 64},
                                 "partitions": [{"start_s": 0.0, "end_s": 1e9, "groups": [[i] for i in range(8)]}]})
        sim = GossipSim(world, seed=0)
        sim.advance_to(duration)
        rates.append(sim.sched.events_run / (8 * duration))
    assert all(r < 20 for r in rates), rates  # measured: 11.6 and 11.6
    assert rates[1] < 1.1 * rates[0], rates
