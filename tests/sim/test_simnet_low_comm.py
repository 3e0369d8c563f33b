"""simnet's sparseloco and noloco methods: the pairwise arm with one pair is an exact average of
two, the byte counts and round times are the formulas', and both train."""

from __future__ import annotations

import pytest
from conftest import simulate

from async_opt import kept, message_bytes
from simnet.runs.config import world_from_dict
from simnet.runs.low_comm import NoLoCoSim
from simnet.world.models import mlp_factory

LOCAL_SGD = {"inner_steps": 4, "outer_lr": 1.0, "momentum": 0.0, "nesterov": False}


def world(n: int, **over: object) -> dict:
    return {"n_peers": n, "duration_s": 4.0, "eval_every_s": 0.5, "speed": {"base_step_s": 0.1, "jitter": 0.0},
            "links": {"latency_s": 0.001, "bandwidth_mbps": 100.0}, "topology": {"kind": "full"},
            "model_args": {"heterogeneity": 1.0}, "diloco": LOCAL_SGD, **over}


def numel() -> int:
    return mlp_factory(0, 2, 0, heterogeneity=1.0).get_flat_params().numel()


def test_noloco_with_one_pair_is_local_sgd_of_two() -> None:
    s = simulate(world(2), [{"name": "pair", "method": "noloco"}, {"name": "avg", "method": "diloco"}])
    pair, avg = s["runs"]["pair"], s["runs"]["avg"]
    assert pair["totals"]["rounds"] == avg["totals"]["rounds"] > 5
    assert pair["final_loss"] == pytest.approx(avg["final_loss"], rel=1e-6)
    assert pair["final_consensus"] == pytest.approx(0.0, abs=1e-12)
    # one exchange each way of φ and x per round, against a ring all-reduce's 2(n−1)/n copies
    rounds, nbytes = pair["totals"]["rounds"], 4 * numel()
    assert pair["bytes_per_peer"] == pytest.approx(rounds * 2 * nbytes)
    assert avg["bytes_per_peer"] == pytest.approx(rounds * nbytes)
    assert pair["totals"]["round_comm_s"] == pytest.approx(2 * nbytes * 8 / 100e6 + 0.001)


def test_noloco_pairs_each_peer_once_and_its_replicas_differ() -> None:
    sim = NoLoCoSim(world_from_dict(world(5)), 0)
    for _ in range(10):
        pairs = sim.pairs()
        flat = [i for p in pairs for i in p]
        assert len(pairs) == 2 and len(set(flat)) == 4
    s = simulate(world(6), [{"name": "pair", "method": "noloco"}])
    run = s["runs"]["pair"]
    assert run["final_consensus"] > 0 and run["final_loss"] != run["final_loss_of_mean"]
    assert run["bytes_per_peer"] == pytest.approx(run["totals"]["rounds"] * 2 * 4 * numel())


def test_sparseloco_bytes_and_round_time_are_the_all_gather_of_its_messages() -> None:
    n = 4
    s = simulate(world(n, sparseloco={"topk": 0.03}), [{"name": "sparse", "method": "sparseloco"}])
    run = s["runs"]["sparse"]
    size = message_bytes(numel(), kept(numel(), 0.03))
    assert size < 0.05 * 4 * numel()
    assert run["bytes_per_peer"] == pytest.approx(run["totals"]["rounds"] * (n - 1) * size)
    assert run["totals"]["round_comm_s"] == pytest.approx((n - 1) * (size * 8 / 100e6 + 0.001))
    assert run["final_consensus"] == 0.0


def test_sparseloco_trains_and_its_feedback_matters() -> None:
    runs = [{"name": "ef", "method": "sparseloco", "set": {"sparseloco": {"ef_decay": 1.0}}},
            {"name": "no_ef", "method": "sparseloco", "set": {"sparseloco": {"ef_decay": 0.0}}},
            {"name": "avg", "method": "diloco"}, {"name": "start", "method": "diloco", "set": {"duration_s": 0.05}}]
    s = simulate(world(4, duration_s=8.0), runs)
    ef, no_ef, avg, start = (s["runs"][k]["final_loss"] for k in ("ef", "no_ef", "avg", "start"))
    assert avg < ef < 0.6 * start  # 3% of each pseudo-gradient, 2 bits each, trains nearly as far
    assert ef < 0.85 * no_ef  # what a round left out, sent later, is worth most of the way


def test_a_bad_sparseloco_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="topk"):
        world_from_dict(world(2, sparseloco={"topk": 0.0}))
