"""The pure helpers of the head-to-head benchmarks: load accounting, curves, the table."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import vs_common as vc  # noqa: E402
import vs_load as vl  # noqa: E402
import vs_report as vr  # noqa: E402
import vs_workloads as vw  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def test_busy_cpu_seconds_leaves_out_idle_and_iowait() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    text = f"cpu  {TICK * 3} {TICK} {TICK * 2} {TICK * 100} {TICK * 50} 0 {TICK} 0 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n"
    assert vl.busy_cpu_seconds(text) == pytest.approx(7.0)


def test_busy_cpu_seconds_refuses_text_without_the_aggregate_line() -> None:
    with pytest.raises(ValueError, match="cpu"):
        vl.busy_cpu_seconds("cpu0 1 2 3 4\n")


def test_others_load_subtracts_the_arm_and_never_goes_negative() -> None:
    assert vl.others_load(busy_s=30.0, own_cpu_s=10.0, wall_s=10.0) == pytest.approx(2.0)
    assert vl.others_load(busy_s=5.0, own_cpu_s=9.0, wall_s=10.0) == 0.0
    with pytest.raises(ValueError, match="wall"):
        vl.others_load(1.0, 0.0, 0.0)


def test_parse_pid_stat_reads_group_and_cpu_past_a_name_with_spaces_and_parens() -> None:
    fields = ["S", "1", "4242", "4242", "0", "-1", "0", "0", "0", "0", "0", str(TICK * 2), str(TICK), "0", "0"]
    group, cpu = vl.parse_pid_stat(f"123 (py (x) y) {' '.join(fields)}")
    assert group == 4242 and cpu == pytest.approx(3.0)


def test_group_cpu_sees_this_process_in_its_own_group() -> None:
    assert os.getpid() in vl.group_cpu(os.getpgrp())


def test_time_to_is_the_first_point_at_or_below_target() -> None:
    curve = [(0.0, 0, 1.0), (5.0, 10, 0.5), (9.0, 20, 0.2), (12.0, 30, 0.4)]
    assert vr.time_to(curve, 0.5) == 5.0
    assert vr.time_to(curve, 0.25) == 9.0
    assert vr.time_to(curve, 0.1) is None


def test_mean_curve_sums_samples_averages_loss_and_stops_at_the_shortest() -> None:
    records = [{"curve": [(0.0, 0, 1.0), (10.0, 100, 0.4), (20.0, 200, 0.2)]},
               {"curve": [(2.0, 0, 3.0), (12.0, 50, 0.6)]}]
    assert vr.mean_curve(records) == [(1.0, 0, 2.0), (11.0, 150, 0.5)]


def test_summary_row_reports_failures_and_per_peer_gossip_figures() -> None:
    failed = vc.ArmResult("x", [], 0.0, float("nan"), 0.0, failed="boom")
    assert vr.summary_row(failed, 1.0) == {"arm": "x", "failed": "boom"}
    recs = [{"curve": [(0.0, 0, 1.0), (10.0, 1024, 0.3)], "samples": 1024, "extra": {"bytes_sent": 10.0}},
            {"curve": [(0.0, 0, 1.0), (10.0, 2048, 0.5)], "samples": 2048, "extra": {"bytes_sent": 30.0}}]
    row = vr.summary_row(vc.ArmResult("g", recs, 10.0, 0.5, 4.0), target=0.45)
    assert row["loss"] == pytest.approx(0.4) and row["worst loss"] == 0.5
    assert row["samples"] == 3072 and row["samples/s"] == pytest.approx(307.2)
    assert row["t to target s"] == 10.0 and row["bytes_sent /peer"] == 20.0


def test_worker_cpu_by_task_is_per_peer_largest_first_and_empty_without_peers() -> None:
    recs = [{"extra": {"worker_cpu_s_by_task": {"publish_pending": 2.0, "handle_request": 1.0}}},
            {"extra": {"worker_cpu_s_by_task": {"publish_pending": 4.0, "summarize_node": 3.0}}}]
    got = vr.worker_cpu_by_task(vc.ArmResult("g", recs, 10.0, 0.5, 4.0))
    assert got == {"publish_pending": 3.0, "summarize_node": 1.5, "handle_request": 0.5}
    assert list(got) == ["publish_pending", "summarize_node", "handle_request"]
    assert vr.worker_cpu_by_task(vc.ArmResult("ddp", [{"extra": {}}], 10.0, 0.5, 4.0)) == {}


def test_markdown_table_unions_columns_and_marks_missing_cells() -> None:
    table = vr.markdown_table([{"arm": "a", "loss": 0.123456}, {"arm": "b", "bytes": 1.5e7}])
    lines = table.splitlines()
    assert lines[0] == "| arm | loss | bytes |"
    assert lines[2] == "| a | 0.1235 | – |" and lines[3] == "| b | – | 1.500e+07 |"


def test_ratios_divide_named_arms_and_skip_missing_ones() -> None:
    out = vr.ratios({"g": 0.3, "d": 0.2}, {"g/d": ("g", "d"), "g/s": ("g", "s")})
    assert out == {"g/d": 1.5, "g/s": None}


def test_workload_has_about_a_million_parameters_and_refuses_bad_sizes() -> None:
    w = vw.MLPWorkload()
    assert w.param_count() == sum(p.numel() for p in w.build_model(0).parameters())
    assert 0.9e6 < w.param_count() < 1.5e6
    with pytest.raises(ValueError):
        vw.MLPWorkload(batch_size=0)


def test_every_rank_starts_from_the_same_weights_but_draws_its_own_batches() -> None:
    w = vw.MLPWorkload(hidden=8, batch_size=4, eval_samples=4)
    a, b = w.task(0), w.task(1)
    assert not a.batch()[0].equal(b.batch()[0])
    assert a.eval_x.equal(b.eval_x)
    assert all(p.equal(q) for p, q in zip(w.build_model().parameters(), w.build_model().parameters()))


def test_held_out_loss_is_the_excess_error_the_teacher_itself_scores_zero() -> None:
    """Training labels carry noise; held-out targets do not, so the label noise (σ² = 0.01 here)
    does not sit under every arm's loss and squash the ratios between arms towards 1."""
    w = vw.MLPWorkload(hidden=8, eval_samples=64)
    task = w.task(0)
    assert task.eval_loss(task.teacher) == 0.0
    x, y = task.batch()
    assert float(((task.teacher(x) - y) ** 2).mean()) == pytest.approx(w.noise**2, rel=0.2)


def test_crossing_times_say_when_each_arm_reached_the_others_final_loss() -> None:
    curves = {"g": [(0.0, 0, 1.0), (5.0, 0, 0.5), (10.0, 0, 0.3)], "d": [(0.0, 0, 1.0), (5.0, 0, 0.4), (10.0, 0, 0.35)]}
    finals = {"g": 0.3, "d": 0.35}
    out = vr.crossing_times(curves, finals, {"g/d": ("g", "d"), "g/x": ("g", "x")})
    assert out == {"g -> d final": 10.0, "d -> g final": None}


def test_report_says_when_each_arm_reached_the_others_final_loss_on_averaged_weights_too(capsys) -> None:
    """The straggler target is read on averaged weights: the ratio line carries those crossings
    (an evaluation before the first sample, NaN, is skipped)."""
    def arm(name: str, live: list[float], averaged: list[float]) -> vc.ArmResult:
        rec = {"curve": [(5.0 * i, 0, v) for i, v in enumerate(live)],
               "averaged": [(5.0 * i, 0, v) for i, v in enumerate(averaged)], "samples": 1}
        return vc.ArmResult(name, [rec], 10.0, 0.0, 1.0)

    vr.report([arm("d", [1.0, 0.5, 0.4], [math.nan, 0.3, 0.2]), arm("g", [1.0, 0.6, 0.5], [math.nan, 0.2, 0.1])],
              None, {"g/d": ("g", "d")}, {})
    line = capsys.readouterr().out.strip().splitlines()[-1]
    got = json.loads(line.removeprefix("ratio: "))
    assert got["t_to_other_final"] == {"g -> d final": None, "d -> g final": 5.0}
    assert got["averaged_t_to_other_final"] == {"g -> d final": 5.0, "d -> g final": None}
    assert got["averaged_g/d"] == pytest.approx(0.5)


def test_every_arm_averages_by_the_peers_own_rule_and_defaults() -> None:
    from peer.core.gossip_config import GossipConfig

    cfg = GossipConfig()
    assert (vc.AVERAGE_EVERY, vc.AVERAGE_SIGMA_REL) == (cfg.period_floor, cfg.average_sigma_rel)


def test_iterate_average_samples_every_period_and_scores_its_average() -> None:
    import torch

    w = vw.MLPWorkload(hidden=8, batch_size=4, eval_samples=16)
    model, task = w.build_model(seed=0), w.task(0)
    avg = vc.IterateAverage(model)
    assert math.isnan(avg.loss(task))  # nothing sampled yet
    for step in range(1, vc.AVERAGE_EVERY):
        avg.observe(model, step)
    assert avg.ema.value is None
    avg.observe(model, vc.AVERAGE_EVERY)
    assert avg.loss(task) == pytest.approx(task.eval_loss(model))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert avg.loss(task) != pytest.approx(task.eval_loss(model))  # the average did not move with the model


def test_averaged_final_loss_is_nan_without_records_and_its_ratio_none() -> None:
    records = [{"curve": [(1.0, 8, 0.5)], "averaged": [(1.0, 8, 0.25)]}, {"curve": [(1.0, 8, 0.7)]}]
    assert vr.final_loss(records) == pytest.approx(0.6)
    assert math.isnan(vr.final_loss(records, "averaged"))
    assert vr.final_loss(records[:1], "averaged") == 0.25
    assert vr.ratios({"a": math.nan, "b": 1.0}, {"a/b": ("a", "b")}) == {"a/b": None}


def test_tail_loss_averages_each_process_last_tenth_of_its_run_then_the_processes() -> None:
    """Evaluations from 90% of each process's last evaluation time on count; NaN ones do not."""
    one = {"curve": [(0.0, 0, 9.0), (89.0, 0, 5.0), (90.0, 0, 2.0), (95.0, 0, math.nan), (100.0, 0, 4.0)]}
    two = {"curve": [(0.0, 0, 9.0), (10.0, 0, 1.0)]}  # last tenth of 10 s: from 9 s
    assert vr.tail_loss([one]) == pytest.approx(3.0)
    assert vr.tail_loss([one, two]) == pytest.approx(2.0)
    assert vr.tail_loss([one], fraction=0.2) == pytest.approx((5.0 + 2.0 + 4.0) / 3)
    assert math.isnan(vr.tail_loss([one, {"curve": []}]))


def test_report_prints_the_tail_captures_beside_the_final_ones(capsys) -> None:
    def arm(name: str, live: list[float]) -> vc.ArmResult:
        return vc.ArmResult(name, [{"curve": [(float(i), 0, v) for i, v in enumerate(live)], "samples": 1}],
                            10.0, 0.0, 1.0)

    # the method's last reading is lucky; over the last tenth (t >= 9) it keeps about half of the gain
    arms = [arm("g", [1.0] * 9 + [0.95, 0.6]), arm("d", [1.0] * 9 + [0.6, 0.6]), arm("a", [1.0] * 11)]
    vr.report(arms, None, {}, {}, captures={"g_captured": ("g", "d", "a")})
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1].removeprefix("ratio: "))
    assert got["g_captured"] == pytest.approx(1.0)
    assert got["tail_g_captured"] == pytest.approx(0.5625)


def test_gain_captured_is_the_share_of_the_reference_gain_over_alone() -> None:
    losses = {"gossip": 0.9, "ddp": 0.6, "alone": 1.0, "worse": 1.2, "nan": math.nan}
    got = vr.gain_captured(losses, {"quarter": ("gossip", "ddp", "alone"), "negative": ("worse", "ddp", "alone"),
                                    "no_gain": ("gossip", "alone", "ddp"), "missing": ("gossip", "ddp", "absent"),
                                    "not_finite": ("nan", "ddp", "alone")})
    assert got == {"quarter": 0.25, "negative": -0.5, "no_gain": None, "missing": None, "not_finite": None}


def test_loss_at_samples_interpolates_between_evaluations_and_not_past_the_last() -> None:
    curve = [(0.0, 0, 2.0), (10.0, 100, 1.0), (20.0, 300, 0.5)]
    assert vr.loss_at_samples(curve, 50) == pytest.approx(1.5)
    assert vr.loss_at_samples(curve, 200) == pytest.approx(0.75)
    assert vr.loss_at_samples(curve, 300) == pytest.approx(0.5)
    assert vr.loss_at_samples(curve, 301) is None


def test_at_equal_steps_reads_the_reference_after_the_lone_peers_steps_not_at_the_budget() -> None:
    """A single process on its own core takes twice the steps of peers sharing the cores: at the budget
    its lead over the lone peers is 0.5 / 0.4, after their 100 samples each it is 0.5 / 0.45."""
    def arm(name: str, procs: int, curve: list[tuple[float, int, float]]) -> vc.ArmResult:
        recs = [{"curve": curve, "averaged": curve, "samples": curve[-1][1]} for _ in range(procs)]
        return vc.ArmResult(name, recs, 10.0, 0.0, 1.0)

    single = arm("single", 1, [(0.0, 0, 1.0), (5.0, 100, 0.45), (10.0, 200, 0.4)])
    alone, gossip = arm("alone x2", 2, [(0.0, 0, 1.0), (10.0, 100, 0.5)]), arm("gossip x2", 2, [(0.0, 0, 1.0), (10.0, 90, 0.46)])
    got = vr.at_equal_steps([single, alone, gossip], "single", "alone x2", "gossip x2")
    assert got == {"lead": pytest.approx(0.5 / 0.45, abs=1e-4), "closed": pytest.approx(0.04 / 0.05, abs=1e-4)}
    assert vr.gain_captured({"single": 0.4, "alone x2": 0.5, "gossip x2": 0.46},
                            {"x": ("gossip x2", "single", "alone x2")}) == {"x": pytest.approx(0.4)}
    missing = vr.at_equal_steps([single, alone], "single", "alone x2", "gossip x2")
    assert missing == {"lead": None, "closed": None}
    short = arm("single", 1, [(0.0, 0, 1.0), (5.0, 50, 0.45)])  # stopped before the peers' step count
    assert vr.at_equal_steps([short, alone, gossip], "single", "alone x2", "gossip x2") == {"lead": None, "closed": None}


def test_report_reads_every_method_at_equal_steps_each_under_its_own_label(capsys) -> None:
    """A split run's variant arm is scored at equal steps too, not only the default gossip arm."""
    def arm(name: str, curve: list[tuple[float, int, float]]) -> vc.ArmResult:
        return vc.ArmResult(name, [{"curve": curve, "averaged": curve, "samples": curve[-1][1]}], 10.0, 0.0, 1.0)

    arms = [arm("single", [(0.0, 0, 1.0), (5.0, 100, 0.45), (10.0, 200, 0.4)]),
            arm("alone x2", [(0.0, 0, 1.0), (10.0, 100, 0.5)]), arm("gossip x2", [(0.0, 0, 1.0), (10.0, 90, 0.46)]),
            arm("gossip x2 [k=1]", [(0.0, 0, 1.0), (10.0, 90, 0.48)])]
    vr.report(arms, None, {}, {}, equal_steps=("single", "alone x2", {"gossip": "gossip x2", "v": "gossip x2 [k=1]"}))
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1].removeprefix("ratio: "))
    assert got["gossip_gap_closed_of_single_at_equal_steps"] == pytest.approx(0.8, abs=1e-4)
    assert got["v_gap_closed_of_single_at_equal_steps"] == pytest.approx(0.4, abs=1e-4)
    assert got["averaged_v_gap_closed_of_single_at_equal_steps"] == pytest.approx(0.4, abs=1e-4)


def test_an_arms_mean_model_is_the_mean_of_every_process_last_parameters_and_scores_as_one(tmp_path) -> None:
    import torch
    from torch import nn

    w = vw.MLPWorkload(hidden=8, batch_size=4, eval_samples=16)
    models = [w.build_model(seed=s) for s in (0, 1)]
    flats = [nn.utils.parameters_to_vector(m.parameters()).detach() for m in models]
    clock = vc.Clock(tmp_path, 0, 1.0, 1)
    paths = [tmp_path / f"rank{r}.json" for r in (0, 1)]
    assert vc.mean_final_params(paths) is None  # nothing written yet
    vc.Record(0).write(paths[0], clock, flats[0])
    assert vc.mean_final_params(paths) is None, "one process's parameters are not the arm's mean"
    vc.Record(1).write(paths[1], clock, flats[1])
    mean = vc.mean_final_params(paths)
    assert torch.equal(mean, (flats[0] + flats[1]) / 2)
    assert json.loads(paths[1].read_text())["rank"] == 1
    assert vc.held_out_loss(w, flats[0]) == pytest.approx(w.task(0).eval_loss(models[0]))
    assert vc.held_out_loss(w, mean) != pytest.approx(vc.held_out_loss(w, flats[0]))


def test_the_table_shows_the_mean_model_only_where_an_arm_was_scored() -> None:
    rec = {"curve": [(0.0, 0, 1.0), (1.0, 8, 0.5)], "averaged": [(1.0, 8, 0.4)], "samples": 8, "extra": {}}
    scored = vr.summary_row(vc.ArmResult("g", [rec], 1.0, 0.0, 1.0, mean_model_loss=0.45), target=0.5)
    assert scored["mean model loss"] == 0.45
    assert "mean model loss" not in vr.summary_row(vc.ArmResult("h", [rec], 1.0, 0.0, 1.0), target=0.5)


def test_at_equal_steps_reads_a_multi_process_reference_per_process() -> None:
    """A DDP reference of two processes: its curve's samples are summed over both, the lone peers'
    steps are per process, so 100 samples each is the reference's 200 in all."""
    def arm(name: str, procs: int, curve: list[tuple[float, int, float]]) -> vc.ArmResult:
        return vc.ArmResult(name, [{"curve": curve, "averaged": curve, "samples": curve[-1][1]}] * procs, 10.0, 0.0, 1.0)

    ddp = arm("ddp x2", 2, [(0.0, 0, 1.0), (5.0, 100, 0.45), (10.0, 200, 0.4)])
    alone, gossip = arm("alone x2", 2, [(0.0, 0, 1.0), (10.0, 100, 0.5)]), arm("gossip x2", 2, [(0.0, 0, 1.0), (10.0, 90, 0.46)])
    got = vr.at_equal_steps([ddp, alone, gossip], "ddp x2", "alone x2", "gossip x2")
    assert got == {"lead": pytest.approx(0.5 / 0.45, abs=1e-4), "closed": pytest.approx(0.04 / 0.05, abs=1e-4)}
