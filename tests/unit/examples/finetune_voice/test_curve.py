"""curve.py reads the example's printed runs into the judge-versus-minutes table, fit and plot."""

from __future__ import annotations

import json
import math
import sys

import pytest

from tests.paths import REPO

sys.path.insert(0, str(REPO / "examples" / "finetune_voice"))
import curve  # noqa: E402

CONTROLS = {"real": {"clips": 3, "wer": 0.41, "cer": 0.19, "similarity": 0.94, "dnsmos": 3.26},
            "mel codec": {"clips": 3, "wer": 0.36, "cer": 0.18, "similarity": 0.93, "dnsmos": 3.23},
            "noise": {"clips": 3, "wer": 1.0, "cer": 1.0, "similarity": 0.46, "dnsmos": 1.11}}


def run_output(base_steps: int, steps: int, base_s: float, finetune_s: float, similarity: float, dnsmos: float) -> str:
    """What finetune_voice.py prints, cut to the lines curve.py reads and a few it must skip."""
    model = {"clips": 3, "wer": 1.0, "cer": 0.95, "similarity": similarity, "dnsmos": dnsmos}
    doc = {"base": {**model, "similarity": 0.5}, "fine-tuned": model, "controls": CONTROLS}
    return "\n".join([
        f"[2/4] pretraining a tiny base on the built-in corpus for {base_steps} steps (~10 s)",
        "      base: step 1/200 loss 2.436 (5 s)",
        f"[3/4] 2 peers fine-tune for {steps} steps each, gossiping on 127.0.0.1 (~2.2 min)",
        "judge: base cannot speak LJ001-0023, left out: the output would be 1037 frames",
        "judge: " + json.dumps(doc, sort_keys=True),
        "stages: " + json.dumps({"pack": 7.0, "base": base_s, "fine-tune": finetune_s, "eval+sample": 20.0,
                                 "judge": 150.0, "total": 7.0 + base_s + finetune_s + 170.0}),
        "done in 5.0 min",
    ])


REFERENCE_1X = (200 * 0.12 + 150 * 1.4) / 60  # tiny: a base step 0.12 s, a fine-tuning step 1.4 s


def test_a_run_is_its_steps_its_training_minutes_and_the_judge_line():
    run = curve.parse_run(run_output(200, 150, 30.0, 90.0, 0.55, 1.3))
    assert (run.preset, run.base_steps, run.finetune_steps) == ("tiny", 200, 150)
    assert run.training_minutes == pytest.approx(2.0)  # base + fine-tune, not packing, eval or the judge
    assert run.reference_minutes == pytest.approx(REFERENCE_1X)  # the steps at the reference pace
    assert run.figure("fine-tuned", "similarity") == 0.55
    assert run.figure("real", "dnsmos") == 3.26 and run.figure("noise", "wer") == 1.0


def test_output_without_the_judge_or_its_own_base_is_refused_with_what_is_missing():
    text = run_output(200, 150, 30.0, 90.0, 0.55, 1.3)
    with pytest.raises(ValueError, match="judge:"):
        curve.parse_run(text.replace("judge: {", "no judge table: {"))
    with pytest.raises(ValueError, match="pretrain"):  # a run from a given --base: its training is not all counted
        curve.parse_run(text.replace("pretraining a tiny base on the built-in corpus", "fine-tuning runs/base"))


def test_the_fit_reaches_a_target_where_a_log_linear_trend_says():
    # similarity = 0.5 + 0.1 * log2(minutes): 0.75 at 2 ** 2.5 minutes
    minutes = [1.0, 2.0, 4.0]
    values = [0.5 + 0.1 * math.log2(m) for m in minutes]
    assert curve.crossing(minutes, values, 0.75) == pytest.approx(2**2.5)
    assert curve.crossing(minutes, list(reversed(values)), 0.75) is None  # falling: never
    assert curve.crossing([3.0, 3.0], [0.5, 0.6], 0.75) is None  # one length: no trend


def test_the_verdicts_say_reached_or_extrapolated_with_the_last_figure():
    runs = sorted([curve.parse_run(run_output(200 * k, 150 * k, 30.0 * k, 90.0 * k, 0.5 + 0.1 * math.log2(k), 2.0 + 0.1 * k))
                   for k in (1, 2, 4)], key=lambda r: r.training_minutes)
    lines = curve.verdicts(runs)
    assert lines[0].startswith(f"similarity >= 0.75: not reached; 0.700 at {4 * REFERENCE_1X:.1f} min")
    assert f"reaches it at ~{REFERENCE_1X * 2 ** 2.5:.0f} training min (extrapolated)" in lines[0]
    assert lines[1] == f"dnsmos >= 2.0: reached at {REFERENCE_1X:.1f} training min"


def test_the_table_has_a_row_per_length_then_the_real_voice_and_noise():
    runs = [curve.parse_run(run_output(200 * k, 150 * k, 30.0 * k, 90.0 * k, 0.55, 1.3)) for k in (1, 2)]
    lines = curve.table(runs)
    assert lines[2] == "| 200 + 150 | 3.9 | 2.0 | 5.0 | 1.000 | 0.950 | 0.550 | 1.300 |"
    assert lines[3].startswith("| 400 + 300 | 7.8 | 4.0 |")
    assert lines[4].endswith("| 0.410 | 0.190 | 0.940 | 3.260 |") and lines[4].startswith("| real")
    assert lines[5].startswith("| noise") and len(lines) == 6


def test_the_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    runs = [curve.parse_run(run_output(200 * k, 150 * k, 30.0 * k, 90.0 * k, 0.55, 1.3)) for k in (1, 2)]
    curve.plot(runs, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_nearly_flat_trend_is_not_given_an_absurd_length():
    runs = [curve.parse_run(run_output(200 * k, 150 * k, 30.0 * k, 90.0 * k, 0.55 + 0.001 * k, 1.3)) for k in (1, 2)]
    similarity, dnsmos = curve.verdicts(runs)
    assert similarity.endswith("reaches it only past 100x the longest run (extrapolated)")
    assert dnsmos.endswith("the fit does not rise towards it")
