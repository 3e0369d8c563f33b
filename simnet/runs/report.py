"""Summaries of a scenario: what the seed determines (byte-identical across runs) and what was measured.

The `summary:` line holds only simulated quantities, with sorted keys and floats rounded
to 6 significant digits, so two runs with the same seed print the same bytes. Real-time
costs (seconds, CPU per simulated peer-step) vary with the machine and its load; they are
kept apart, on the `timing:` line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simnet.runs.config import SimConfig
from simnet.runs.runner import RunRecord


def clean(value: Any) -> Any:
    """Round floats to 6 significant digits; non-finite floats become "inf"/"-inf"/"nan"."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return "nan" if value != value else ("inf" if value > 0 else "-inf")
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return clean(float(value))


def dumps(obj: Any) -> str:
    return json.dumps(clean(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def final_loss(rec: RunRecord, key: str = "loss") -> float | None:
    """Mean of `key` (the peers' mean loss; `loss_of_mean`, their mean model's) over the last 10% of
    the run's simulated time (at least the last sample)."""
    rows = [r for r in rec.rows if r.get(key) is not None]
    if not rows:
        return None
    t_end = rows[-1]["t"]
    tail = [r[key] for r in rows if r["t"] >= 0.9 * t_end] or [rows[-1][key]]
    return sum(tail) / len(tail)


def quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def run_summary(rec: RunRecord) -> dict:
    last = rec.rows[-1] if rec.rows else {}
    return {
        "method": rec.method,
        "n_peers": rec.world.n_peers,
        "time_to_target_s": rec.time_to_target_s,
        "final_loss": final_loss(rec),
        "final_loss_of_mean": final_loss(rec, "loss_of_mean"),
        "final_consensus": last.get("consensus"),
        "sim_time_s": rec.sim_time_s,
        "peer_steps": rec.peer_steps,
        "bytes_per_peer": last.get("bytes_per_peer"),
        "diverged_peers": last.get("diverged", 0),
        "staleness_steps_p50": quantile(rec.staleness, 0.5),
        "staleness_steps_p90": quantile(rec.staleness, 0.9),
        "totals": rec.totals,
        "interrupted": rec.interrupted,
        "cut_short": rec.cut_short,
    }


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or b == 0:
        return None
    return a / b


def worst_loss_ratio(a: RunRecord, b: RunRecord, warmup_fraction: float = 0.2) -> float | None:
    """max over shared sample times (after the first 20% of the shorter run) of loss_a / loss_b.

    A whole-curve check: a run can end close to another and still have spiked on the way.
    """
    lb = {r["t"]: r["loss"] for r in b.rows}
    t_end = min(a.sim_time_s, b.sim_time_s)
    worst = None
    for r in a.rows:
        t, la = r["t"], r["loss"]
        if t < warmup_fraction * t_end or t > t_end or t not in lb or la is None or lb[t] is None:
            continue
        q = math.inf if not math.isfinite(la) else ratio(la, lb[t])
        if q is not None and (worst is None or q > worst):
            worst = q
    return worst


def build_summary(cfg: SimConfig, records: list[RunRecord], interrupted: bool) -> dict:
    runs = {r.name: run_summary(r) for r in records}
    by_name = {r.name: r for r in records}
    ratios = {}
    for a, b in cfg.compare:
        if a in runs and b in runs:
            ratios[f"{a}/{b}"] = {
                "time_to_target": ratio(runs[a]["time_to_target_s"], runs[b]["time_to_target_s"]),
                "final_loss": ratio(runs[a]["final_loss"], runs[b]["final_loss"]),
                "worst_loss_ratio": worst_loss_ratio(by_name[a], by_name[b]),
            }
    target = {r.name: r.world.target_loss for r in records}
    cost = {r.name: r.world.cost.describe() for r in records if r.method == "gossip"}
    return {"scenario": cfg.name, "seed": cfg.seed, "target_loss": target, "runs": runs, "ratios": ratios,
            "protocol_cost": cost, "interrupted": interrupted}


def build_timing(cfg: SimConfig, records: list[RunRecord]) -> dict:
    runs = {
        r.name: {
            "real_s": r.real_s,
            "cpu_total_s": r.cpu_total_s,
            "cpu_per_peer_step_s": r.cpu_measured_s / r.peer_steps_measured if r.peer_steps_measured else None,
            "cpu_per_peer_step_all_s": r.cpu_sim_s / r.peer_steps if r.peer_steps else None,
            "cost_warmup_s": r.world.cost_warmup_s,
        }
        for r in records
    }
    ratios = {
        f"{a}/{b}": ratio(runs[a]["cpu_per_peer_step_s"], runs[b]["cpu_per_peer_step_s"])
        for a, b in cfg.compare if a in runs and b in runs
    }
    return {"runs": runs, "cost_ratio": ratios}


def table(summary: dict, timing: dict) -> str:
    head = f"{'run':<12} {'method':<9} {'peers':>5} {'to target s':>11} {'final loss':>10} {'consensus':>9} " \
           f"{'peer-steps':>10} {'MB/peer':>8} {'sim s':>7} {'real s':>6} {'cpu us/step':>11}"
    lines = [head, "-" * len(head)]
    for name, r in summary["runs"].items():
        t = timing["runs"].get(name, {})
        cost = t.get("cpu_per_peer_step_s")
        lines.append(
            f"{name:<12} {r['method']:<9} {r['n_peers']:>5} {_fmt(r['time_to_target_s'], '11.1f')} "
            f"{_fmt(r['final_loss'], '10.4g')} {_fmt(r['final_consensus'], '9.3g')} {r['peer_steps']:>10} "
            f"{_fmt((r['bytes_per_peer'] or 0) / 1e6, '8.2f')} {r['sim_time_s']:>7.0f} {t.get('real_s', 0):>6.1f} "
            f"{_fmt(None if cost is None else cost * 1e6, '11.0f')}"
        )
    for pair, v in summary["ratios"].items():
        lines.append(f"ratio {pair}: time-to-target {_fmt(v['time_to_target'], '.3f').strip()}, "
                     f"final loss {_fmt(v['final_loss'], '.4f').strip()}, "
                     f"worst loss ratio along the way {_fmt(v['worst_loss_ratio'], '.4f').strip()}")
    for name, r in summary["runs"].items():
        if "data" in r["totals"]:
            lines.append(data_line(name, r["totals"]["data"]))
    for line in sorted(set(summary.get("protocol_cost", {}).values())):
        lines.append(line)
    for pair, v in timing["cost_ratio"].items():
        warmup = max((timing["runs"][n].get("cost_warmup_s") or 0.0) for n in pair.split("/"))
        after = f" after the first {warmup:g} s" if warmup else ""
        lines.append(f"cost ratio {pair} (CPU per simulated peer-step{after}, measured): {_fmt(v, '.3f').strip()}")
    if summary["interrupted"]:
        lines.append("interrupted: results cover what ran before Ctrl+C")
    return "\n".join(lines)


def data_line(run: str, d: dict) -> str:
    """What a `[world.data]` run measured, in one line."""
    train, held = d["train_start_s"], d["all_held_s"]
    return (f"data {run} (plan {d['plan']}): {d['peers_training']}/{d['peers_fetching']} peers training after "
            f"{_fmt(train['median'], '.0f').strip()} s median, {_fmt(train['max'], '.0f').strip()} s max; every peer "
            f"holds all {d['shards']} shards at {_fmt(held, '.0f').strip()} s; seed uploaded "
            f"{_fmt(d['seed_upload_x_corpus'], '.2f').strip()}x the corpus ({d['corpus_bytes'] / 1e9:g} GB), "
            f"any other peer at most {_fmt(d['max_other_upload_x_corpus'], '.2f').strip()}x; "
            f"{d['shard_bytes_moved'] / 1e9:.1f} GB of shards moved")


def _fmt(v: float | None, spec: str) -> str:
    width = int(spec.split(".")[0] or 0)
    if v is None:
        return "-".rjust(width)
    if not math.isfinite(v):
        return "inf".rjust(width)
    return format(v, spec)


def write_outputs(out_dir: Path, records: list[RunRecord], summary: dict, timing: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "metrics.jsonl", "w", encoding="utf-8") as f:
        for rec in records:
            for row in rec.rows:
                f.write(dumps(row) + "\n")
    (out_dir / "summary.json").write_text(json.dumps(clean(summary), sort_keys=True, indent=2) + "\n", "utf-8")
    (out_dir / "timing.json").write_text(json.dumps(clean(timing), sort_keys=True, indent=2) + "\n", "utf-8")
