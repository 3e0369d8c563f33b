"""The example's plan promises only the stages that will run, the judge included when it runs."""

from __future__ import annotations

import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "examples" / "finetune_voice"))
import stage_progress  # noqa: E402

DEFAULTS = dict(clips=24, peers=2, steps=150, synth_steps=32)


def test_the_judge_is_planned_per_clip_it_speaks_and_hears_and_only_when_it_runs():
    est = stage_progress.Estimator("tiny")
    per = stage_progress.REFERENCE_SECONDS
    speak, hear = per[("any", "speak_clip")] + 32 * per[("tiny", "synth_step")], per[("any", "hear_clip")]
    judged = stage_progress.plan_stages(est, base_steps=200, spoken_clips=8, heard_clips=20, **DEFAULTS)
    recalled = stage_progress.plan_stages(est, base_steps=200, spoken_clips=8, heard_clips=8, **DEFAULTS)
    unjudged = stage_progress.plan_stages(est, base_steps=200, spoken_clips=0, heard_clips=0, **DEFAULTS)
    assert hear > 0 and judged["judge"] == pytest.approx(8 * speak + 20 * hear)
    assert judged["judge"] - recalled["judge"] == pytest.approx(12 * hear)  # controls recalled are not heard again
    assert unjudged["judge"] == 0.0
    assert {k: v for k, v in judged.items() if k != "judge"} == {k: v for k, v in unjudged.items() if k != "judge"}


def test_a_given_base_plans_no_pretraining():
    est = stage_progress.Estimator("tiny")
    assert stage_progress.plan_stages(est, base_steps=0, spoken_clips=0, heard_clips=0, **DEFAULTS)["base"] == 0.0
    base = stage_progress.plan_stages(est, base_steps=200, spoken_clips=0, heard_clips=0, **DEFAULTS)["base"]
    assert base == pytest.approx(200 * stage_progress.REFERENCE_SECONDS[("tiny", "base_step")]
                                 + stage_progress.REFERENCE_SECONDS[("any", "process")])


def test_the_time_to_the_end_is_the_rest_of_the_plan_at_the_pace_measured_so_far():
    est = stage_progress.Estimator("tiny")
    planned = {"pack": 20.0, "base": 30.0, "fine-tune": 200.0, "eval+sample": 50.0, "judge": 100.0}
    assert est.to_the_end(planned, None) == pytest.approx(400.0)
    est.finished(planned["pack"], 10.0)  # this machine ran the first stage at half the reference's seconds
    assert est.to_the_end(planned, "pack") == pytest.approx(0.5 * 380.0)
    est.finished(planned["base"], 60.0)  # then slower: 70 s where the reference took 50
    assert est.to_the_end(planned, "base") == pytest.approx(1.4 * 350.0)
    line = est.eta(planned, "base", 70.0)
    assert line.strip().startswith("~8.2 min to the end, ~9.3 min in all") and "1.40x" in line, line


def test_the_opening_estimate_starts_from_the_last_runs_pace_and_this_runs_stages_outweigh_it(tmp_path):
    path = tmp_path / "pace.json"
    assert stage_progress.read_last_pace(path, "tiny") is None
    stage_progress.save_pace(path, "tiny", 2.0)
    stage_progress.save_pace(path, "small", 3.0)
    assert stage_progress.read_last_pace(path, "tiny") == 2.0 and stage_progress.read_last_pace(path, "small") == 3.0
    est = stage_progress.Estimator("tiny", stage_progress.read_last_pace(path, "tiny"))
    planned = {"pack": 20.0, "fine-tune": 600.0}
    assert est.to_the_end(planned, None) == pytest.approx(2.0 * 620.0) and est.measured is None
    est.finished(600.0, 600.0)  # a long stage at the reference pace: it outweighs the last run's
    assert est.measured == 1.0 and 1.0 < est.slowdown < 1.1


def test_an_unreadable_pace_file_is_no_pace(tmp_path):
    path = tmp_path / "pace.json"
    path.write_text("[1, 2", encoding="utf-8")
    assert stage_progress.read_last_pace(path, "tiny") is None
    path.write_text('{"tiny": "fast"}', encoding="utf-8")
    assert stage_progress.read_last_pace(path, "tiny") is None
    stage_progress.save_pace(path, "tiny", 1.5)
    assert stage_progress.read_last_pace(path, "tiny") == 1.5
