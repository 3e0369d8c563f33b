"""simnet `[world.data]`: peers fetch a corpus from one seed over WAN links with the real fetch plan.

A small swarm (6 peers, 8 shards of 50 MB, 20 Mb/s uplinks) must meet the `data` scenario's
target, the seed uploading at most 3x the corpus while every peer gets all of it, and the
control (manifest order, from the seed alone) must do worse. The full 16-peer scenario is slow.
"""

from __future__ import annotations

import copy

import pytest
from conftest import simulate

from simnet import load_scenario, run
from simnet.runs.config import world_from_dict
from simnet.runs.report import dumps
from simnet.runs.scenario import scenario_from_dict

WORLD = {
    "n_peers": 6, "model": "mlp", "duration_s": 3000.0, "eval_every_s": 5.0, "bootstrap": "first",
    "speed": {"base_step_s": 1.0, "spread": 0.2, "jitter": 0.05},
    "links": {"latency_s": 0.04, "latency_dist": "lognormal", "latency_jitter": 0.2, "bandwidth_mbps": 20.0, "loss": 0.001},
    "gossip": {"gossip_every": 4, "compression": "int8"},
    "data": {"shards": 8, "shard_mb": 50.0, "holders": [0]},
}
RUNS = [{"name": "swarm"}, {"name": "seed_only", "set": {"data": {"plan": "seed_only"}}}]


@pytest.fixture(scope="module")
def small() -> dict:
    return simulate(WORLD, RUNS)


@pytest.mark.slow  # a swarm fetching its corpus, tens of seconds on 2 cores: run by .ci/run's slow section
def test_every_peer_gets_the_corpus_and_the_seed_uploads_at_most_3x(small) -> None:
    d = small["runs"]["swarm"]["totals"]["data"]
    assert d["peers_complete"] == d["peers_fetching"] == 5 and d["all_held_s"] is not None
    assert d["shard_bytes_moved"] == 5 * d["corpus_bytes"]
    assert d["seed_upload_x_corpus"] <= 3.0
    assert d["max_other_upload_x_corpus"] > 0  # peers served each other what they learned from adverts
    assert d["counts"]["adverts_read"] > 0
    assert small["runs"]["swarm"]["sim_time_s"] <= d["all_held_s"] + WORLD["eval_every_s"]  # stopped once replicated


@pytest.mark.slow  # a swarm fetching its corpus, tens of seconds on 2 cores: run by .ci/run's slow section
def test_the_seed_only_control_does_worse(small) -> None:
    plan, control = small["runs"]["swarm"]["totals"]["data"], small["runs"]["seed_only"]["totals"]["data"]
    assert control["peers_complete"] == 5
    assert control["seed_upload_x_corpus"] == 5.0  # every byte of every copy came from the seed
    assert control["max_other_upload_x_corpus"] == 0
    assert control["seed_upload_x_corpus"] > 1.5 * plan["seed_upload_x_corpus"]
    assert control["all_held_s"] > plan["all_held_s"]


@pytest.mark.slow  # a swarm fetching its corpus, tens of seconds on 2 cores: run by .ci/run's slow section
def test_a_peer_trains_only_once_it_holds_a_shard(small) -> None:
    d = small["runs"]["swarm"]["totals"]["data"]
    assert d["peers_training"] == 5
    assert d["train_start_s"]["median"] >= d["first_shard_s"]["median"] > 0
    assert d["train_start_s"]["max"] >= d["first_shard_s"]["max"]
    assert small["runs"]["swarm"]["peer_steps"] > 0


@pytest.mark.slow  # a swarm fetching its corpus, tens of seconds on 2 cores: run by .ci/run's slow section
def test_same_seed_same_summary_and_another_seed_another() -> None:
    runs = RUNS[:1]
    world = {**WORLD, "data": {**WORLD["data"], "shards": 4}}
    a, b = simulate(world, runs, seed=3), simulate(world, runs, seed=3)
    a.pop("timing"), b.pop("timing")
    assert dumps(a) == dumps(b)
    c = simulate(world, runs, seed=4)
    c.pop("timing")
    assert dumps(c) != dumps(a)


@pytest.mark.parametrize("change, message", [
    ({"churn": {"mode": "poisson", "rate_per_min": 0.1}}, "without churn"),
    ({"data": {"shards": 8, "fetch": {"cache_gb": 0.1}}}, "simnet does not model eviction"),
    ({"data": {"shards": 8, "fetch": {"manifest": "x"}}}, "unknown data.fetch"),
    ({"data": {"shards": 8, "fetch": {"max_upload_mb_s": 1.0}}}, "unknown data.fetch"),  # not modelled: refused, not ignored
    ({"data": {"shards": 8, "plan": "oracle"}}, "data.plan must be one of"),
    ({"data": {"shards": 8, "holders": [9]}}, "data.holders must be peer indices"),
])
def test_bad_data_settings_fail_naming_the_problem(change, message) -> None:
    world = copy.deepcopy(WORLD)
    world.update(change)
    with pytest.raises(ValueError, match=message):
        world_from_dict(world)


def test_the_baselines_refuse_a_corpus_to_fetch() -> None:
    with pytest.raises(ValueError, match="baselines model neither churn, attacks nor data"):
        scenario_from_dict({"world": WORLD, "runs": [{"name": "ar", "method": "allreduce"}]})


@pytest.mark.slow
def test_the_data_scenario_at_full_size() -> None:
    s = run(load_scenario("data", seed=0), emit=lambda x: None, echo=lambda x: None)
    plan, control = s["runs"]["swarm"]["totals"]["data"], s["runs"]["seed_only"]["totals"]["data"]
    assert plan["peers_complete"] == control["peers_complete"] == 15
    assert plan["seed_upload_x_corpus"] <= 3.0
    assert control["seed_upload_x_corpus"] == 15.0
    assert plan["all_held_s"] < control["all_held_s"]
