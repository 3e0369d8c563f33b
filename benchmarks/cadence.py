"""Mixing at a long publish period: the gossip rule against local SGD, DiLoCo and DDP at H steps a period.

    python benchmarks/cadence.py [--scenario single] [--periods 1,4,16,64,256] [--seeds 0,1,2,3,4]
    python benchmarks/cadence.py --periods 64 --seeds 20,21 --arm 'nops=gossip:gossip.partner_steps=0'
    python benchmarks/cadence.py --periods 64 --arm 'local_sgd_lr2=local_sgd:model_args.lr=0.2'
    python benchmarks/cadence.py --periods 64 --arm 'ddp_lr8=allreduce:model_args.lr=0.8'

A peer of a large model publishes every tens to hundreds of steps (docs/performance.md); the
methods built for that regime (local SGD, DiLoCo) average exactly every H steps. For each seed the
scenario's single process trains alone for the scenario's duration D and its final loss is the
target; then, for each period H, every arm trains for `--length` × D from the same start:

- ``gossip``: the scenario's gossip run, publishing every H steps (the default rule);
- ``local_sgd``: an exact all-reduce of the parameters every H steps (DiLoCo, outer lr 1, no momentum);
- ``diloco``: DiLoCo's published outer step (Nesterov, lr 0.7, momentum 0.9) every H steps;
- ``sparseloco``: SparseLoCo every H steps: top-k 2-bit pseudo-gradients with error feedback
  (the scenario's `sparseloco` section), all-gathered, outer lr 1 without momentum;
- ``noloco``: every H steps each peer averages with one random partner (outer lr 1, no momentum);
- ``allreduce`` (DDP, one all-reduce per step) and ``alone`` (every link cut) once, whatever H;
- each ``--arm NAME=BASE:SETTINGS``: BASE (any of the above but `alone`) with SETTINGS
  (``SECTION.FIELD=VALUE;…`` as in simnet_seeds.py's --variant), at each H (allreduce: once).

Printed per arm and H: the time to the target over D (median, range and each seed; inf: never),
the final loss over the target, and the bytes each peer sent per training step. A time at or
below 1/3 of D means the n peers were worth at least three single processes. Progress goes to
stderr; the last line is `ratio: {...}` (JSON).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402
from simnet_seeds import TARGET_RULES, fmt, scenario_data, simulate, with_target  # noqa: E402
from simnet_variants import parse_variant  # noqa: E402

from simnet.runs.config import merge  # noqa: E402

BASES: dict[str, Callable[[int], dict[str, Any]]] = {
    "gossip": lambda h: {"method": "gossip", "set": {"gossip": {"gossip_every": h}}},
    "local_sgd": lambda h: {"method": "diloco", "set": {"diloco": {
        "inner_steps": h, "outer_lr": 1.0, "momentum": 0.0, "nesterov": False}}},
    "diloco": lambda h: {"method": "diloco", "set": {"diloco": {
        "inner_steps": h, "outer_lr": 0.7, "momentum": 0.9, "nesterov": True}}},
    "sparseloco": lambda h: {"method": "sparseloco", "set": {"diloco": {
        "inner_steps": h, "outer_lr": 1.0, "momentum": 0.0, "nesterov": False}}},
    "noloco": lambda h: {"method": "noloco", "set": {"diloco": {
        "inner_steps": h, "outer_lr": 1.0, "momentum": 0.0, "nesterov": False}}},
}
"""The arms that take a period: each H's run (its `method` and `set`) from the base's name."""

ONCE = ("allreduce", "alone")
"""Arms whose figures do not depend on H, run once per seed (DDP; the same peers cut apart)."""

DDP = "allreduce"
"""The base of an `--arm` run once, whatever H: DDP with the arm's settings (a step size)."""


def parse_arm(text: str) -> tuple[str, str, dict[str, Any]]:
    """`'name=base:settings'` -> (name, base, settings table); settings may be empty."""
    name, eq, rest = text.partition("=")
    base, _colon, settings = rest.partition(":")
    if not (eq and name.isidentifier() and name not in ONCE and (base in BASES or base == DDP)):
        raise ValueError(f"--arm {text!r}: expected NAME=BASE[:SECTION.FIELD=VALUE;…] with BASE one of "
                         f"{', '.join([*BASES, DDP])}")
    return name, base, parse_variant(settings, "--arm") if settings.strip() else {}


def arm_run(scenario: dict[str, Any], name: str, base: str, settings: dict[str, Any], h: int) -> dict[str, Any]:
    """One run of the scenario table: `base` at period `h` with `settings` over it."""
    run = copy.deepcopy(BASES[base](h))
    gossip = next(r for r in scenario["runs"] if r["name"] == "gossip")
    if base == "gossip":
        run["set"] = merge(copy.deepcopy(gossip.get("set", {})), run["set"])
    run["set"] = merge(run["set"], copy.deepcopy(settings))
    run["name"] = f"{name}_h{h}"
    return run


def once_runs(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario's DDP and all-links-cut runs, as they are."""
    return [copy.deepcopy(r) for r in scenario["runs"] if r["name"] in ONCE]


def build(name: str, periods: list[int], arms: list[tuple[str, str, dict[str, Any]]], length: float,
          duration: float | None = None) -> tuple[dict[str, Any], float]:
    """The scenario table with every arm's runs (and the reference run) and its duration D
    (`duration`, or the scenario's own)."""
    scenario = scenario_data(name)
    ref = TARGET_RULES[name][0]
    if duration is not None:
        scenario["world"]["duration_s"] = duration
    duration = float(scenario["world"]["duration_s"])
    runs = [r for r in scenario["runs"] if r["name"] == ref]
    runs += once_runs(scenario)
    runs += [{"name": arm, "method": DDP, "set": copy.deepcopy(settings)} for arm, base, settings in arms if base == DDP]
    runs += [arm_run(scenario, arm, base, settings, h) for h in periods for arm, base, settings in arms if base != DDP]
    for run in runs:
        if run["name"] != ref:
            run.setdefault("set", {})["duration_s"] = length * duration
    return {**scenario, "runs": runs, "compare": []}, duration


def seed_figures(summary: dict, target: float, duration: float, n_peers: int) -> dict[str, dict[str, float | None]]:
    """Per run: time to `target` / D, final loss and the mean model's over `target`, bytes sent
    per peer per training step."""
    def over_target(loss: float | None) -> float | None:
        return None if loss is None else (loss / target if math.isfinite(loss) else math.inf)

    out = {}
    for run, row in summary["runs"].items():
        t = row["time_to_target_s"]
        steps = row["peer_steps"] / n_peers if row["peer_steps"] else 0
        out[run] = {"time": math.inf if t is None else t / duration,
                    "final": over_target(row["final_loss"]),
                    "final_mean": over_target(row["final_loss_of_mean"]),
                    "bytes_per_step": (row["bytes_per_peer"] or 0.0) / steps if steps else None}
    return out


def med(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(known) if known else None


def table(results: list[dict], periods: list[int], arms: list[str], key: str, once: tuple[str, ...] = ONCE) -> str:
    """A markdown table, one row per arm, one column per H: the median over seeds of `key` (range);
    an arm of `once` has one figure, whatever H."""
    lines = ["| arm | " + " | ".join(f"H={h}" for h in periods) + " |", "|---|" + "---|" * len(periods)]
    for arm in [*once, *arms]:
        cells = []
        for h in periods:
            run = arm if arm in once else f"{arm}_h{h}"
            vals = [r.get(run, {}).get(key) for r in results]
            known = [v for v in vals if v is not None]
            cells.append(f"{fmt(med(vals))} ({fmt(min(known)) if known else 'n/a'}–{fmt(max(known)) if known else 'n/a'})"
                         if arm not in once or h == periods[0] else "″")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="single", choices=sorted(TARGET_RULES.keys() & {"single", "single16"}))
    ap.add_argument("--periods", default="1,4,16,64,256", help="publish periods H, comma-separated")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--length", type=float, default=2.0, help="each arm's run as a multiple of D (default 2)")
    ap.add_argument("--duration", type=float, default=None, help="D in simulated seconds (default: the scenario's)")
    ap.add_argument("--arm", action="append", default=[], help="NAME=BASE[:SETTINGS], repeatable")
    ap.add_argument("--no-defaults", action="store_true", help="only the --arm arms (and allreduce, alone)")
    args = ap.parse_args()
    try:
        periods = [int(h) for h in args.periods.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
        extra = [parse_arm(a) for a in args.arm]
        if not (periods and all(h >= 1 for h in periods) and args.length > 0 and (args.duration or 1) > 0):
            raise ValueError("--periods must list whole numbers >= 1, --length and --duration be > 0")
    except ValueError as exc:
        sys.exit(f"cadence.py: {exc}")
    arms = ([] if args.no_defaults else [(b, b, {}) for b in BASES]) + extra
    data, duration = build(args.scenario, periods, arms, args.length, args.duration)
    n_peers = int(data["world"]["n_peers"])
    ref = TARGET_RULES[args.scenario][0]

    def emit(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results = []
    for seed in seeds:
        emit(f"seed {seed}: {ref} over D = {duration:g} s, to set the target")
        summary, _t, _r = simulate(with_target(data, None, [ref]), seed, emit)
        target = summary["runs"][ref]["final_loss"]
        emit(f"seed {seed}: target {target:.4f}; {len(data['runs']) - 1} runs of {args.length:g} D each")
        arms_only = {**data, "runs": [r for r in data["runs"] if r["name"] != ref]}
        arms_only = with_target(arms_only, target)
        arms_only["world"]["stop_at_target"] = False
        summary, _t, _r = simulate(arms_only, seed, emit)
        results.append(seed_figures(summary, target, duration, n_peers))
    names = [a for a, b, _s in arms if b != DDP]
    once = (*ONCE, *(a for a, b, _s in arms if b == DDP))
    print(f"machine: {describe()}")
    print(f"scenario {args.scenario}, {n_peers} peers, D = {duration:g} s, each arm {args.length:g} D, seeds "
          f"{args.seeds}; median (range) over seeds")
    for key, title in (("time", "time to the single process's final loss / D (inf: never)"),
                       ("final", "final loss / the single process's final loss"),
                       ("final_mean", "the peers' mean model: final loss / the single process's final loss"),
                       ("bytes_per_step", "bytes sent per peer per training step")):
        print(f"\n{title}\n\n{table(results, periods, names, key, once)}")
    print("ratio: " + json.dumps({f"seed{s}": r for s, r in zip(seeds, results)}, default=str))


if __name__ == "__main__":
    main()
