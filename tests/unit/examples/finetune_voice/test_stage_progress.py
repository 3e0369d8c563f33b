"""The example's plan promises only the stages that will run, the judge included when it runs."""

from __future__ import annotations

import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "examples" / "finetune_voice"))
import stage_progress  # noqa: E402

DEFAULTS = dict(clips=24, peers=2, steps=150, synth_steps=32)


def test_the_judge_is_planned_per_clip_it_hears_and_only_when_it_runs():
    est = stage_progress.Estimator("tiny")
    per_clip = stage_progress.REFERENCE_SECONDS[("any", "judge_clip")]
    judged = stage_progress.plan_stages(est, base_steps=200, judged_clips=20, **DEFAULTS)
    unjudged = stage_progress.plan_stages(est, base_steps=200, judged_clips=0, **DEFAULTS)
    assert per_clip > 0 and judged["judge"] == pytest.approx(20 * per_clip)
    assert unjudged["judge"] == 0.0
    assert {k: v for k, v in judged.items() if k != "judge"} == {k: v for k, v in unjudged.items() if k != "judge"}


def test_a_given_base_plans_no_pretraining():
    est = stage_progress.Estimator("tiny")
    assert stage_progress.plan_stages(est, base_steps=0, judged_clips=0, **DEFAULTS)["base"] == 0.0
    base = stage_progress.plan_stages(est, base_steps=200, judged_clips=0, **DEFAULTS)["base"]
    assert base == pytest.approx(200 * stage_progress.REFERENCE_SECONDS[("tiny", "base_step")]
                                 + stage_progress.REFERENCE_SECONDS[("any", "process")])
