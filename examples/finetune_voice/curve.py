"""What more CPU training buys the voice: the judge's figures against minutes of training.

    python examples/finetune_voice/curve.py runs/voice-1x.log runs/voice-2x.log ... --plot curve.png

Each LOG is the printed output of one finetune_voice.py run that pretrained its own base; its
`stages: {json}` line gives the seconds of each stage, its `judge: {json}` line the figures of
the base, the fine-tuned model and the controls. Runs are placed by their training steps at the
reference machine's pace (stage_progress.REFERENCE_SECONDS), since a shared machine's load
moves the measured minutes of one run against another; the measured ones are in the table. The loss falls long before a listener hears a voice, so the question
"is the default run long enough?" is answered by these figures, each beside the real voice
and noise measured in the same run, and by where a fit of them against log-minutes would
reach a target: a figure past the last run is an extrapolation and is printed as one.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from stage_progress import Estimator

FIGURES = ("wer", "similarity", "dnsmos")
TARGETS = {"similarity": 0.75, "dnsmos": 2.0}
"""What a default run should reach for its output to sound like a voice (higher is better)."""
CONTROLS = ("real", "noise")
FAR = 100
"""A fit that reaches a target only past this many times the longest run's minutes says so, not when:
a nearly flat line crosses at absurd lengths that no measurement supports."""


@dataclass(frozen=True)
class Run:
    """One finetune_voice.py run: its length and what the judge made of it."""

    preset: str
    base_steps: int
    finetune_steps: int
    seconds: dict[str, float]
    judge: dict

    @property
    def training_minutes(self) -> float:
        """Minutes this run spent training (the base and the fine-tune), as measured."""
        return (self.seconds["base"] + self.seconds["fine-tune"]) / 60

    @property
    def reference_minutes(self) -> float:
        """Minutes its training steps take at the reference pace: the cost the curve is drawn against."""
        est = Estimator(self.preset)
        return (est.reference("base_step", self.base_steps) + est.reference("finetune_step", self.finetune_steps)) / 60

    def figure(self, model: str, name: str) -> float | None:
        row = self.judge["controls"][model] if model in CONTROLS else self.judge.get(model)
        return None if row is None else row.get(name)


def parse_run(text: str) -> Run:
    """A run from the example's printed output; refuses output without the lines the curve needs."""
    stages = re.findall(r"^stages: (\{.*\})$", text, re.M)
    judged = re.findall(r"^judge: (\{.*\})$", text, re.M)
    fine = re.search(r"fine-tune for (\d+) steps each", text)
    base = re.search(r"pretraining a (\S+) base on the built-in corpus for (\d+) steps", text)
    if not (stages and judged and fine and base):
        raise ValueError("not a finished finetune_voice.py run that pretrained its base, with the judge: needs its "
                         "`stages:`, `judge:`, pretraining and fine-tune lines")
    return Run(base.group(1), int(base.group(2)), int(fine.group(1)), json.loads(stages[-1]), json.loads(judged[-1]))


def table(runs: list[Run]) -> list[str]:
    """A markdown table: one row per run (the fine-tuned model), then the controls of the last run."""
    lines = ["| base + fine-tune steps | training min, reference pace | training min, measured | whole run min, "
             "measured | WER | CER | similarity | DNSMOS |", "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        row = run.judge["fine-tuned"]
        lines.append(f"| {run.base_steps} + {run.finetune_steps} | {run.reference_minutes:.1f} | "
                     f"{run.training_minutes:.1f} | {run.seconds['total'] / 60:.1f} | "
                     + " | ".join(_cell(row.get(name)) for name in ("wer", "cer", "similarity", "dnsmos")) + " |")
    for name in CONTROLS:
        row = runs[-1].judge["controls"][name]
        lines.append(f"| {name} (control) | | | | "
                     + " | ".join(_cell(row.get(k)) for k in ("wer", "cer", "similarity", "dnsmos")) + " |")
    return lines


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def crossing(minutes: list[float], values: list[float], target: float) -> float | None:
    """Minutes at which the least-squares line of value against log(minutes) reaches `target`
    (None where the line does not rise towards it, or with fewer than two lengths)."""
    if len(set(minutes)) < 2:
        return None
    xs = [math.log(m) for m in minutes]
    mx, my = sum(xs) / len(xs), sum(values) / len(values)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, values)) / sum((x - mx) ** 2 for x in xs)
    if slope <= 0:
        return None
    return math.exp(mx + (target - my) / slope)


def verdicts(runs: list[Run]) -> list[str]:
    """For each target: the last run's figure, and where the fit would reach the target."""
    minutes = [run.reference_minutes for run in runs]
    lines = []
    for name, target in TARGETS.items():
        values = [run.figure("fine-tuned", name) for run in runs]
        reached = [m for m, v in zip(minutes, values) if v is not None and v >= target]
        if reached:
            lines.append(f"{name} >= {target}: reached at {min(reached):.1f} training min")
            continue
        at = crossing(minutes, [v for v in values if v is not None], target)
        if at is None:
            where = "the fit does not rise towards it"
        elif at > FAR * minutes[-1]:
            where = f"a log-linear fit reaches it only past {FAR}x the longest run (extrapolated)"
        else:
            where = f"a log-linear fit reaches it at ~{at:.0f} training min (extrapolated)"
        lines.append(f"{name} >= {target}: not reached; {values[-1]:.3f} at {minutes[-1]:.1f} min, {where}")
    return lines


def plot(runs: list[Run], png: Path) -> None:
    """One panel per figure: the fine-tuned and base models against training minutes, the real
    voice and noise of each run as dashed lines, the target as a dotted one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [run.reference_minutes for run in runs]
    fig, axes = plt.subplots(1, len(FIGURES), figsize=(10, 3.2))
    for ax, name in zip(axes, FIGURES):
        for model, style in (("fine-tuned", "o-"), ("base", "s:")):
            ax.plot(minutes, [run.figure(model, name) for run in runs], style, label=model)
        for control, colour in (("real", "tab:green"), ("noise", "tab:gray")):
            ax.plot(minutes, [run.figure(control, name) for run in runs], "--", color=colour, label=control)
        if name in TARGETS:
            ax.axhline(TARGETS[name], color="tab:red", linestyle=":", label="target")
        ax.set_xscale("log")
        ax.set_xticks(minutes, [f"{m:.0f}" for m in minutes])
        ax.minorticks_off()
        ax.set_title(name if name != "wer" else "WER (lower is better)", fontsize=9)
        ax.set_xlabel("training minutes (2 busy cores, reference pace)", fontsize=8)
    fig.legend(*axes[1].get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(png, dpi=70)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", type=Path, nargs="+", help="the printed output of finetune_voice.py runs")
    ap.add_argument("--plot", type=Path, default=None, help="write the curve here (needs matplotlib)")
    args = ap.parse_args()
    runs = sorted((parse_run(log.read_text(errors="replace")) for log in args.logs), key=lambda r: r.reference_minutes)
    for line in table(runs) + [""] + verdicts(runs):
        print(line)
    if args.plot:
        plot(runs, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
