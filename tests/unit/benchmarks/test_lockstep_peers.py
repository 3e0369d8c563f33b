"""benchmarks/lockstep_peers.py: its arms draw the same batches and differ only where they say,
and the script runs every arm at every publish period."""

from __future__ import annotations

import math
import sys

import torch

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import lockstep_peers  # noqa: E402
from lockstep_arms import Feed, Gossip, Periodic, one, run  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

from async_opt.sync import DiLoCoOuter  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402

SMALL = MLPWorkload(in_dim=8, hidden=16, out_dim=4, batch_size=32, eval_samples=64, seed=3)
STEPS = 12


def test_one_replica_alone_is_ddp_of_one_process_step_for_step() -> None:
    # same model, same batches, same optimiser
    assert one(SMALL, 1, STEPS, "alone").loss == one(SMALL, 1, STEPS, "ddp").loss


def test_mixing_changes_the_run_and_late_copies_change_it_again() -> None:
    cfg = GossipConfig(swarm="t")
    on_time = one(SMALL, 3, STEPS, "gossip", cfg=cfg, late=False, seed=0).loss
    late = one(SMALL, 3, STEPS, "gossip", cfg=cfg, late=True, seed=0).loss
    assert len({one(SMALL, 3, STEPS, "alone").loss, on_time, late}) == 3
    assert one(SMALL, 3, STEPS, "gossip", cfg=cfg, late=False, seed=0).loss == on_time  # deterministic from the seed


def test_a_replica_publishes_every_h_steps() -> None:
    for every in (1, 4):
        feed = Feed(SMALL)
        arm = Gossip(SMALL, feed, 3, 12, GossipConfig(swarm="t", gossip_every=every), False, 0)
        run(feed, 3, {"gossip": arm})
        assert [node.public.seq for node in arm.nodes] == [12 // every] * 3


def test_per_period_in_lockstep_with_adam_is_the_codec_of_the_period() -> None:
    """At H = 1 the two rules are one (why the script runs the control only above it). Above it,
    every copy a replica mixes was published at the step of its own last copy (staleness 0 in
    steps and in periods) and Adam takes no partner steps, so what per_period changes in lockstep
    is only the codec a publish is sent with and its mixing rate (peer.core.period_codec): with a
    dense codec, which no period changes, the control's rows match gossip's."""
    def loss(every: int, per_period: bool, compression: str = "topk:0.1+int8") -> float:
        cfg = GossipConfig(swarm="t", gossip_every=every, per_period=per_period, compression=compression)
        return one(SMALL, 3, 16, "gossip", cfg=cfg, late=False, seed=0).loss

    assert loss(1, True) == loss(1, False)
    assert loss(4, True, "int8") == loss(4, False, "int8") != one(SMALL, 3, 16, "alone").loss
    assert loss(4, True) != loss(4, False)


def test_a_period_ends_with_every_replica_at_the_global_point() -> None:
    feed = Feed(SMALL)
    arms = {"local": Periodic(SMALL, feed, 3, 8, 4, None),
            "diloco 1, no momentum": Periodic(SMALL, feed, 3, 8, 4, DiLoCoOuter(1.0, 0.0)),
            "diloco": Periodic(SMALL, feed, 3, 8, 4, DiLoCoOuter(0.7, 0.9))}
    run(feed, 3, arms)
    for arm in arms.values():
        xs = [r.get_flat_params() for r in arm.replicas]
        assert all(torch.equal(x, arm.global_x) for x in xs)
    # an outer step of lr 1 without momentum is the plain average; the published one is not
    assert torch.allclose(arms["local"].global_x, arms["diloco 1, no momentum"].global_x, atol=1e-6)
    assert not torch.allclose(arms["local"].global_x, arms["diloco"].global_x, atol=1e-4)


def test_the_script_runs_every_arm_at_every_period_at_its_smallest() -> None:
    out = lockstep_peers.main(["--peers", "2", "--steps", "8", "--every", "1,4", "--seeds", "0",
                               "--hidden", "16", "--batch", "32"])
    result, ratio = out["result"], out["ratio"]
    gossip = ["gossip", "gossip, late"]
    control = ["gossip, per_period off", "gossip, per_period off, late"]
    expected = {"0": ["alone", "DDP"], "1": [*gossip, "local SGD", "DiLoCo"],
                "4": [*gossip, *control, "local SGD", "DiLoCo"]}
    assert {h: sorted(arms) for h, arms in result.items()} == {h: sorted(arms) for h, arms in expected.items()}
    for h, arms in result.items():
        for name, by_seed in arms.items():
            row = by_seed["0"]
            assert math.isfinite(row["loss"]) and math.isfinite(row["end"]), (h, name)
            assert (row["wire"] != {}) == (name != "alone"), (h, name)
    assert result["4"]["gossip"]["0"]["wire"]["sent"] > 0
    assert sorted(ratio) == ["1", "4"] and len(ratio["4"]["capture"]["control_over_diloco"]) == 1
