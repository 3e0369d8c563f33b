"""Reading the arms of the head-to-head benchmarks: loss curves, times to a target, the
markdown table, the equal-samples plot and the `ratio:` line. Pure apart from printing and
the plot; imports only the standard library (matplotlib when there)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from vs_common import ArmResult


def time_to(curve: Sequence[Sequence[float]], target: float) -> float | None:
    """First time a (t, samples, loss) curve is at or below `target`; None if never."""
    for t, _, loss in curve:
        if loss <= target:
            return float(t)
    return None


def mean_curve(records: Sequence[dict], curve: str = "curve") -> list[tuple[float, int, float]]:
    """Pointwise mean over processes (time, summed samples, mean loss), up to the shortest curve
    (`curve`: "curve", the live parameters, or "averaged", the averaged weights)."""
    curves = [r.get(curve) or [] for r in records]
    n = min(len(c) for c in curves)
    return [(sum(c[i][0] for c in curves) / len(curves), sum(c[i][1] for c in curves),
             sum(c[i][2] for c in curves) / len(curves)) for i in range(n)]


def final_loss(records: Sequence[dict], curve: str = "curve") -> float:
    """Mean over processes of the last evaluation of `curve`: "curve" (the live parameters) or
    "averaged" (each arm's averaged weights; NaN when a record has none)."""
    ends = [r[curve][-1][2] if r.get(curve) else math.nan for r in records]
    return sum(ends) / len(ends)


TAIL_FRACTION = 0.1
"""The share of each process's run `tail_loss` averages over."""


def tail_loss(records: Sequence[dict], curve: str = "curve", fraction: float = TAIL_FRACTION) -> float:
    """Mean over processes of each one's mean evaluation in the last `fraction` of its run: the loss
    at the budget read with less of the noise of the last few steps in it, which is most of a
    single live reading's spread on the MLP (docs/benchmarks/mixing-rule.md#the-square-root-rule-for-adam)."""
    means = []
    for r in records:
        points = [p for p in r.get(curve) or [] if math.isfinite(p[2])]
        if not points:
            return math.nan
        start = points[-1][0] * (1.0 - fraction)
        tail = [p[2] for p in points if p[0] >= start]
        means.append(sum(tail) / len(tail))
    return sum(means) / len(means) if means else math.nan


def summary_row(arm: ArmResult, target: float) -> dict:
    if arm.failed:
        return {"arm": arm.name, "failed": arm.failed[:200]}
    curve = mean_curve(arm.records)
    samples = sum(r["samples"] for r in arm.records)
    row = {"arm": arm.name, "procs": len(arm.records), "loss": final_loss(arm.records),
           "worst loss": max(r["curve"][-1][2] for r in arm.records),
           "averaged loss": final_loss(arm.records, "averaged"), "samples": samples,
           "samples/s": samples / arm.wall_s, "t to target s": time_to(curve, target),
           "last eval at s": max(r["curve"][-1][0] for r in arm.records),
           "others' load (cores)": arm.others_cores, "cpu s": arm.own_cpu_s}
    if math.isfinite(arm.mean_model_loss):
        row["mean model loss"] = arm.mean_model_loss  # the mean of its processes' last parameters
    for key in ("bytes_sent", "bytes_received", "exchanges", "mixes", "mixed_staleness_median", "gossip_cpu_s",
                "train_cpu_s", "worker_cpu_s", "mix_s", "step_scale", "epochs"):
        vals = [r["extra"][key] for r in arm.records if r.get("extra", {}).get(key) is not None]
        if vals:
            row[f"{key} /peer"] = sum(vals) / len(vals)
    return row


def worker_cpu_by_task(arm: ArmResult) -> dict[str, float]:
    """Seconds of the gossip worker's CPU per peer, by job (publish_pending, handle_request, ...), the
    largest first: where the protocol CPU of an arm went (empty for an arm without peers)."""
    per_task: dict[str, list[float]] = {}
    for r in arm.records:
        for task, seconds in r.get("extra", {}).get("worker_cpu_s_by_task", {}).items():
            per_task.setdefault(task, []).append(float(seconds))
    means = {task: sum(v) / len(arm.records) for task, v in per_task.items()}
    return dict(sorted(means.items(), key=lambda kv: -kv[1]))


def markdown_table(rows: Sequence[dict]) -> str:
    cols: list[str] = []
    for row in rows:
        cols += [c for c in row if c not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c)) for c in cols) + " |")
    return "\n".join(lines)


def _cell(v: object) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def plot_equal_samples(arms: Sequence[ArmResult], path: Path, title: str = "") -> str:
    """Held-out loss against total samples consumed, one line per arm; says why when skipped."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm in arms:
        if arm.failed or not arm.records:
            continue
        curve = mean_curve(arm.records)
        line, = ax.plot([c[1] for c in curve], [c[2] for c in curve], marker=".", label=arm.name)
        averaged = [c for c in mean_curve(arm.records, "averaged") if math.isfinite(c[2])]
        if averaged:
            ax.plot([c[1] for c in averaged], [c[2] for c in averaged], linestyle="--", color=line.get_color(),
                    label=f"{arm.name}, averaged weights")
    ax.set_xlabel("samples consumed, all processes together")
    ax.set_ylabel("held-out loss, mean over processes\n(dashed: averaged weights)")
    ax.set_title(title, fontsize=8)
    ax.set_yscale("log")
    ax.legend(fontsize=6, ncol=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot written: {path}"


def ratios(by_name: dict[str, float], pairs: dict[str, tuple[str, str]]) -> dict[str, float | None]:
    """`a / b` of final losses for each named pair; None when either arm is missing or has no finite loss."""
    out: dict[str, float | None] = {}
    for key, (a, b) in pairs.items():
        ok = a in by_name and b in by_name and math.isfinite(by_name[a]) and math.isfinite(by_name[b]) and by_name[b] > 0
        out[key] = round(by_name[a] / by_name[b], 4) if ok else None
    return out


def gain_captured(by_name: dict[str, float], captures: dict[str, tuple[str, str, str]]) -> dict[str, float | None]:
    """(alone − method) / (alone − reference) of final losses for each (method, reference, alone):
    the share of the reference's gain over training alone that the method keeps (1: all of it,
    0: none, < 0: worse than alone). None when an arm is missing, not finite, or the reference
    gained nothing."""
    out: dict[str, float | None] = {}
    for key, (method, ref, alone) in captures.items():
        vals = [by_name.get(name, math.nan) for name in (method, ref, alone)]
        gain = vals[2] - vals[1]
        ok = all(math.isfinite(v) for v in vals) and gain > 0
        out[key] = round((vals[2] - vals[0]) / gain, 4) if ok else None
    return out


def loss_at_samples(curve: Sequence[Sequence[float]], samples: float) -> float | None:
    """The loss of a (t, samples, loss) curve after `samples`, linear between its evaluations; None
    past its last one."""
    for (_, s0, l0), (_, s1, l1) in zip(curve, curve[1:]):
        if s0 <= samples <= s1:
            return l0 if s1 == s0 else l0 + (samples - s0) / (s1 - s0) * (l1 - l0)
    return None


def at_equal_steps(results: Sequence[ArmResult], reference: str, alone: str, method: str,
                   curve: str = "curve") -> dict[str, float | None]:
    """The reference's lead and the share of it the method closes with the reference read after as
    many samples (so steps, at one batch size) as each process of `alone` took, not at the budget:
    a single process on a core of its own takes more steps than peers that share the cores, and
    that lead is the cores', not the corpus's. Keys: `lead`, alone / reference; `closed`,
    (alone − method) / (alone − reference)."""
    arms = {r.name: r for r in results if r.records}
    if not all(name in arms for name in (reference, alone, method)):
        return {"lead": None, "closed": None}
    per_process = sum(r["samples"] for r in arms[alone].records) / len(arms[alone].records)
    n_ref = len(arms[reference].records)  # mean_curve sums samples over the reference's processes
    ref = loss_at_samples([(t, s / n_ref, loss) for t, s, loss in mean_curve(arms[reference].records, curve)
                           if math.isfinite(loss)], per_process)
    lone, own = final_loss(arms[alone].records, curve), final_loss(arms[method].records, curve)
    if ref is None or not all(math.isfinite(v) for v in (lone, own)) or lone <= ref:
        return {"lead": None if ref is None or ref <= 0 else round(lone / ref, 4), "closed": None}
    return {"lead": round(lone / ref, 4), "closed": round((lone - own) / (lone - ref), 4)}


def crossing_times(curves: dict[str, list], finals: dict[str, float],
                   pairs: dict[str, tuple[str, str]]) -> dict[str, float | None]:
    """For each pair, when each arm's mean curve first reached the other's final loss (None: never
    within the budget): who gets there first, at the resolution of the evaluations."""
    out: dict[str, float | None] = {}
    for a, b in pairs.values():
        if a in curves and b in curves:
            for x, y in ((a, b), (b, a)):
                t = time_to(curves[x], finals[y])
                out[f"{x} -> {y} final"] = None if t is None else round(t, 2)
    return out


def report(results: Sequence[ArmResult], target: float | None, pairs: dict[str, tuple[str, str]], extra: dict,
           captures: dict[str, tuple[str, str, str]] | None = None,
           equal_steps: tuple[str, str, dict[str, str]] | None = None) -> None:
    """The table (target: the first arm's final loss unless given), failures, and `ratio: {json}`;
    `captures` adds `gain_captured` figures, on live and on averaged weights; `equal_steps`
    (reference, alone, {label: method}) adds `at_equal_steps`'s for each method, keyed by its label."""
    if target is None:
        target = final_loss(results[0].records) if results[0].records else 0.0
    print(f"\ntarget loss for 't to target': {target:.4g} (the first arm's loss at the budget unless --target)\n")
    print(markdown_table([summary_row(r, target) for r in results]))
    for r in results:
        if r.failed:
            print(f"\n{r.name} FAILED: {r.failed}")
        elif by_task := worker_cpu_by_task(r):
            print(f"\n{r.name}: gossip worker CPU s/peer by job: " + ", ".join(f"{t} {s:.3g}" for t, s in by_task.items()))
    loss = {r.name: final_loss(r.records) for r in results if r.records}
    averaged = {r.name: final_loss(r.records, "averaged") for r in results if r.records}
    crossings = crossing_times({r.name: mean_curve(r.records) for r in results if r.records}, loss, pairs)
    averaged_curves = {r.name: [c for c in mean_curve(r.records, "averaged") if math.isfinite(c[2])]
                       for r in results if r.records}
    averaged_crossings = crossing_times(averaged_curves, averaged, pairs)
    for title, found in (("", crossings), (", averaged weights", averaged_crossings)):
        print(f"\nseconds until one arm reached the other's final loss{title} (None: not within the budget):")
        for key, t in found.items():
            print(f"  {key}: {t}")
    averaged_ratios = {f"averaged_{key}": v for key, v in ratios(averaged, pairs).items()}
    captured = {**gain_captured(loss, captures or {}),
                **{f"averaged_{key}": v for key, v in gain_captured(averaged, captures or {}).items()}}
    for key, v in captured.items():
        print(f"{key}: {v}  ((alone − method) / (alone − reference) of final losses)")
    tails = {r.name: tail_loss(r.records) for r in results if r.records}
    tail_captured = {f"tail_{key}": v for key, v in gain_captured(tails, captures or {}).items()}
    for key, v in tail_captured.items():
        print(f"{key}: {v}  (the same, of each process's mean loss over the last {TAIL_FRACTION:.0%} of its run)")
    captured.update(tail_captured)
    if equal_steps is not None:
        ref, alone, methods = equal_steps
        for prefix, curve in (("", "curve"), ("averaged_", "averaged")):
            closed = {}
            for label, method in methods.items():
                found = at_equal_steps(results, ref, alone, method, curve)  # the same lead for every method
                captured[f"{prefix}lead_of_{ref}_at_equal_steps"] = found["lead"]
                captured[f"{prefix}{label}_gap_closed_of_{ref}_at_equal_steps"] = closed[method] = found["closed"]
            print(f"{prefix}{ref} after {alone}'s steps per process: {alone} / {ref} "
                  f"{captured[f'{prefix}lead_of_{ref}_at_equal_steps']}, share of that lead "
                  + ", ".join(f"{method} closes {c}" for method, c in closed.items()))
    mean_models = {r.name: round(r.mean_model_loss, 6) for r in results if math.isfinite(r.mean_model_loss)}
    print("ratio: " + json.dumps({**ratios(loss, pairs), **averaged_ratios, **captured, "t_to_other_final": crossings,
                                  "mean_model_loss": mean_models,
                                  "averaged_t_to_other_final": averaged_crossings, **extra}, sort_keys=True))
