"""A built-in simnet scenario's headline figures over several seeds: median, range and each seed.

    python benchmarks/simnet_seeds.py --scenario stragglers [--seeds 0,1,2,3,4] [--out DIR]
    python benchmarks/simnet_seeds.py --scenario single --seeds 5,6,7 --runs gossip --variant 'session.pulls_per_publish=4'
    python benchmarks/simnet_seeds.py --scenario single --seeds 10,11 --runs gossip --world 'model_args.samples_per_shard=8192'

One seed is one draw of the problem (teacher, shards, speeds, graph, churn), so a single
seed can flatter or hurt any method. For each seed this runs the scenario and extracts its
headline figure(s); stdout gets the machine, a markdown table (median, min-max range, each
seed's value, the target and on how many seeds it holds) and a last line
`ratio: {...}` (JSON, per figure: median, min, max, per_seed). Progress goes to stderr.

Targets come from each seed's own problem: in the scenarios that compare gossip with the
synchronous baselines (stragglers, wan) a fixed `target_loss` may be out of reach for some
seeds, so the all-reduce run goes first, over the full duration, and every run of that seed
then uses `target_loss = 1.05 x` the all-reduce's final loss (`stop_at_target` and
`tail_fraction` as in the scenario). In the single scenario the reference is the single
process: its final loss over the full duration D is the target, and the headline is the time
the 8 gossip peers take to reach it, over D. The simulated figures are exact for a seed; the scale
scenario's cost ratio is real CPU time and depends on the machine's load (printed per seed).

`--variant 'session.pulls_per_publish=4;gossip.step_scale_power=0.5'` adds a run, the scenario's
gossip run with those settings changed, and its figures (simnet_variants.py); `--runs gossip`
keeps only the runs named (the reference run always), so a tuning grid is one command.
`--world 'model_args.samples_per_shard=8192'` changes the world for every run, the reference
included: the figures then answer for that setting instead of the scenario's own.

With --out DIR: DIR/seed<S>/ gets each seed's metrics.jsonl, summary.json and timing.json
(no plots), and DIR/seeds.json the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402
from simnet_figures import (Figure, cost_ratio, final_ratio, load_average, mean_model_ratio, pair,  # noqa: E402
                            read_figure, run_value, target_of, time_over_duration, time_ratio, worst_ratio)
from simnet_variants import BASE_RUN, parse_variant, variant_name, with_variants, with_world  # noqa: E402

from simnet.runs.report import build_summary, build_timing, clean, table, write_outputs  # noqa: E402
from simnet.runs.runner import run_records  # noqa: E402
from simnet.runs.scenario import builtin_scenarios, read_scenario_text, scenario_from_dict  # noqa: E402

TARGET_RULES: dict[str, tuple[str, float]] = {
    "stragglers": ("allreduce", 1.05),
    "wan": ("allreduce", 1.05),
    "single": ("single", 1.0),
    "single16": ("single", 1.0),
}
"""Scenarios whose target loss is set per seed: (reference run, factor); the target is the
factor x the reference run's final loss over the full duration."""


def baseline_figures(limits: bool) -> list[Figure]:
    """stragglers and wan: time-to-target ratios against the seed's own target."""
    return [
        Figure("target loss (1.05 x all-reduce final)", target_of("gossip")),
        Figure("gossip/allreduce time to target", time_ratio("gossip", "allreduce"),
               "<=" if limits else None, 1 / 3 if limits else None),
        Figure("gossip/diloco time to target", time_ratio("gossip", "diloco"),
               "<=" if limits else None, 2 / 3 if limits else None),
        Figure("gossip/allreduce final loss", final_ratio("gossip", "allreduce")),
    ]


def data_figures() -> list[Figure]:
    """data: the swarm's fetch plan against the control that reads everything from the seed."""
    def data(run: str, *path: str) -> Callable[[dict, dict], float | None]:
        return run_value(run, "totals", "data", *path)

    return [
        Figure("swarm: seed upload / corpus", data("swarm", "seed_upload_x_corpus"), "<=", 3.0),
        Figure("swarm: peers holding every shard (of 15)", data("swarm", "peers_complete"), ">=", 15),
        Figure("swarm: every peer holds every shard, s", data("swarm", "all_held_s")),
        Figure("swarm: time until a peer trains, median s", data("swarm", "train_start_s", "median")),
        Figure("swarm: time until a peer trains, max s", data("swarm", "train_start_s", "max")),
        Figure("swarm: most uploaded by another peer / corpus", data("swarm", "max_other_upload_x_corpus")),
        Figure("swarm: shard bytes moved / corpus", data("swarm", "moved_x_corpus")),
        Figure("seed_only (control): seed upload / corpus", data("seed_only", "seed_upload_x_corpus")),
        Figure("seed_only (control): every peer holds every shard, s", data("seed_only", "all_held_s")),
        Figure("seed_only (control): time until a peer trains, max s", data("seed_only", "train_start_s", "max")),
    ]


def single_figures(peers: int, limit: float, half_swarm: bool = False) -> list[Figure]:
    """single / single16: the peers, each as fast as one process, against that process's final loss at D.
    `limit`: the most of D the swarm may take, 1 / (the machines it must be worth); `half_swarm`: the
    scenario has a `gossip{peers // 2}` run, half the peers holding the same samples."""
    half = [Figure(f"gossip x{peers // 2}, the same samples: time to target / D",
                   time_over_duration(f"gossip{peers // 2}", "single"))] if half_swarm else []
    return [
        Figure("target loss (single process's final loss)", target_of("gossip")),
        Figure("gossip: time to target / D", time_over_duration("gossip", "single"), "<=", limit),
        *half,
        Figure("alone (control, every link cut): time to target / D", time_over_duration("alone", "single"), ">", 0.5),
        Figure("no_partner_steps (control): time to target / D", time_over_duration("no_partner_steps", "single")),
        Figure("gossip_before (control, the rule before): time to target / D",
               time_over_duration("gossip_before", "single")),
        Figure(f"allreduce x{peers}, same step: time to target / D", time_over_duration("allreduce", "single")),
        Figure(f"allreduce x{peers}, best step: time to target / D", time_over_duration("allreduce_tuned", "single")),
        Figure("diloco (H=4), best step: time to target / D", time_over_duration("diloco", "single")),
        Figure("single: time to its own final loss / D", time_over_duration("single", "single")),
        Figure("gossip/single final loss", final_ratio("gossip", "single")),
        Figure("gossip's mean model/single final loss", mean_model_ratio("gossip", "single")),
        Figure("allreduce/single final loss", final_ratio("allreduce", "single")),
        Figure("alone/single final loss", final_ratio("alone", "single")),
    ]


DEFENDED_ATTACKS = ("clipped", "alie", "nan", "pushy_alie", "pushy_steer", "steer", "edge", "flip_alone", "future",
                    "future_alie", "join_liar", "join_far", "sybil", "leech")
"""The byzantine runs whose honest peers keep every defence (the controls left out)."""


FIGURES: dict[str, list[Figure]] = {
    "stragglers": baseline_figures(limits=True),
    "wan": baseline_figures(limits=False),
    "churn": [
        Figure("churn/no_churn final loss", final_ratio("churn", "no_churn"), "<=", 1.05),
        Figure("churn/no_churn worst loss ratio", pair("worst_loss_ratio", "churn/no_churn"), "<=", 1.05),
        Figure("no_fetch/no_churn final loss", final_ratio("no_fetch", "no_churn")),
        Figure("no_fetch/no_churn worst loss ratio", pair("worst_loss_ratio", "no_fetch/no_churn")),
    ],
    "byzantine": [
        Figure("clipped/clean final loss", final_ratio("clipped", "clean"), "<=", 1.05),
        Figure("plain/clean final loss", final_ratio("plain", "clean")),
        Figure("alie/clean final loss", final_ratio("alie", "clean")),
        Figure("pushy_alie/clean final loss", final_ratio("pushy_alie", "clean"), "<=", 1.05),
        Figure("pushy_alie_undefended/clean final loss (control: pushed copies pull)",
               final_ratio("pushy_alie_undefended", "clean")),
        Figure("pushy_steer/clean final loss", final_ratio("pushy_steer", "clean"), "<=", 1.05),
        Figure("nan/clean final loss", final_ratio("nan", "clean")),
        Figure("steer/clean final loss", final_ratio("steer", "clean"), "<=", 1.05),
        Figure("edge/clean final loss", final_ratio("edge", "clean"), "<=", 1.05),
        Figure("flip_alone/clean final loss", final_ratio("flip_alone", "clean"), "<=", 1.05),
        Figure("flip_alone_clipped/clean final loss (control: clip_power 1)", final_ratio("flip_alone_clipped", "clean")),
        Figure("future/clean final loss", final_ratio("future", "clean"), "<=", 1.05),
        Figure("future_trusting/clean final loss (control)", final_ratio("future_trusting", "clean")),
        Figure("future_alie/clean final loss", final_ratio("future_alie", "clean"), "<=", 1.05),
        Figure("future_alie_trusting/clean final loss (control)", final_ratio("future_alie_trusting", "clean")),
        Figure("join_liar/clean final loss", final_ratio("join_liar", "clean"), "<=", 1.05),
        Figure("join_liar states adopted from attackers", run_value("join_liar", "totals", "adopted_from_attacker"),
               "<=", 0),
        Figure("join_liar joins (honest states adopted)", run_value("join_liar", "totals", "joins")),
        Figure("join_liar_trusting/clean final loss (control)", final_ratio("join_liar_trusting", "clean")),
        Figure("join_liar_trusting states adopted from attackers",
               run_value("join_liar_trusting", "totals", "adopted_from_attacker")),
        Figure("join_far/clean final loss", final_ratio("join_far", "clean"), "<=", 1.05),
        Figure("join_far_trusting/clean worst loss ratio (control)", pair("worst_loss_ratio", "join_far_trusting/clean")),
        Figure("join_far_trusting/clean final loss (control)", final_ratio("join_far_trusting", "clean")),
        Figure("sybil/clean final loss", final_ratio("sybil", "clean"), "<=", 1.05),
        Figure("sybil snapshots to made-up addresses", run_value("sybil", "totals", "snapshots_to_made_up"), "<=", 0),
        Figure("sybil partners held by made-up addresses at the end", run_value("sybil", "totals", "partners_made_up"),
               "<=", 0),
        Figure("leech/clean final loss", final_ratio("leech", "clean"), "<=", 1.05),
        Figure("leech snapshots received", run_value("leech", "totals", "leech_snapshots"), "<=", 0),
        Figure("leech bytes received", run_value("leech", "totals", "leech_bytes")),
        Figure("leech_trusting/clean final loss (control)", final_ratio("leech_trusting", "clean")),
        Figure("leech_trusting snapshots received (control)", run_value("leech_trusting", "totals", "leech_snapshots")),
        Figure("leech_trusting bytes received (control)", run_value("leech_trusting", "totals", "leech_bytes")),
        Figure("small_steer/small_cut final loss (3 peers, one steering)", final_ratio("small_steer", "small_cut"),
               "<=", 1.05),
        Figure("pair_steer/pair_cut final loss (2 peers, one steering)", final_ratio("pair_steer", "pair_cut"),
               "<=", 1.05),
        Figure("pair_clean/pair_alone final loss (an honest pair keeps its gain)",
               final_ratio("pair_clean", "pair_alone"), "<=", 0.95),
        Figure("attackers_cut/clean final loss (control: the same honest peers, the attackers cut off)",
               final_ratio("attackers_cut", "clean")),
        Figure("worst defended attack / attackers_cut final loss", worst_ratio(DEFENDED_ATTACKS, "attackers_cut")),
        Figure("sybil_trusting/clean final loss (control)", final_ratio("sybil_trusting", "clean")),
        Figure("sybil_trusting snapshots to made-up addresses",
               run_value("sybil_trusting", "totals", "snapshots_to_made_up")),
        Figure("sybil_trusting partners held by made-up addresses at the end",
               run_value("sybil_trusting", "totals", "partners_made_up")),
    ],
    "scale": [
        Figure("n256/n16 cost ratio (CPU per peer-step)", cost_ratio("n256/n16"), "<=", 1.3),
        Figure("load average (1 min) after the seed", load_average),
    ],
    "bootstrap": [
        Figure("one_address/full final loss", final_ratio("one_address", "full"), "<=", 1.05),
        Figure("one_address verified neighbours, min", run_value("one_address", "totals", "verified_neighbours_min"),
               ">=", 4),
        Figure("one_address verified neighbours, median",
               run_value("one_address", "totals", "verified_neighbours_median")),
        Figure("full verified neighbours, min", run_value("full", "totals", "verified_neighbours_min")),
    ],
    "tts": [
        Figure("gossip/allreduce final loss", final_ratio("gossip", "allreduce")),
    ],
    "data": data_figures(),
    "single": single_figures(8, 1 / 3),
    "single16": single_figures(16, 1 / 4, half_swarm=True),
}


def scenario_data(name: str) -> dict[str, Any]:
    text, _where = read_scenario_text(name)
    return tomllib.loads(text)


def simulate(data: dict[str, Any], seed: int, emit: Callable[[str], None]) -> tuple[dict, dict, list]:
    """Run a scenario given as a table; returns (summary, timing, records), nothing printed."""
    cfg = scenario_from_dict(data, f"scenario {data.get('name')!r}", seed=seed, plots=False, progress_every_s=15.0)
    records, interrupted = run_records(cfg, emit)
    if interrupted:
        raise KeyboardInterrupt
    return build_summary(cfg, records, interrupted), build_timing(cfg, records), records


def with_target(data: dict[str, Any], target: float | None, runs: list[str] | None = None) -> dict[str, Any]:
    """`data` with every run's target_loss set (None: no target, run the full duration), optionally fewer runs."""
    out = json.loads(json.dumps(data))
    world = out.setdefault("world", {})
    if target is None:
        world.pop("target_loss", None)
        world["stop_at_target"] = False
    else:
        world["target_loss"] = target
    for run in out["runs"]:
        run.get("set", {}).pop("target_loss", None)
    if runs is not None:
        out["runs"] = [r for r in out["runs"] if r["name"] in runs]
        out["compare"] = []
    return out


def run_seed(name: str, seed: int, emit: Callable[[str], None], data: dict[str, Any] | None = None
             ) -> tuple[dict, dict, list]:
    """One seed of a scenario (`data`: its table as `scenario_table` built it; default the built-in
    one), with its own target where the scenario has a reference run."""
    data = scenario_data(name) if data is None else data
    if name in TARGET_RULES:
        run, factor = TARGET_RULES[name]
        emit(f"seed {seed}: {run} over the full duration, to set the target")
        ref, _timing, _records = simulate(with_target(data, None, [run]), seed, emit)
        final = ref["runs"][run]["final_loss"]
        target = factor * final
        emit(f"seed {seed}: target loss {target:.4f} ({factor:g} x {run} final {final:.4f})")
        data = with_target(data, target)
    summary, timing, records = simulate(data, seed, emit)
    timing["load_average"] = os.getloadavg()[0]
    return summary, timing, records


def scenario_table(name: str, variants: Sequence[dict[str, Any]] = (), runs: Sequence[str] | None = None,
                   world: dict[str, Any] | None = None) -> dict[str, Any]:
    """The built-in scenario's table with `world` merged into its world (every run's), `variants`
    added (simnet_variants.py) and only the runs named in `runs` kept (None: all; the variants and
    the reference run always), checked by the scenario loader, which names a misspelt setting
    before anything runs."""
    data = scenario_data(name) if world is None else with_world(scenario_data(name), world)
    data = with_variants(data, list(variants))
    names = [variant_name(i) for i in range(1, len(variants) + 1)]
    data = select_runs(data, name, None if runs is None else [*runs, *names])
    scenario_from_dict(data, f"scenario {name!r} with --world/--variant/--runs", seed=0)
    return data


def select_runs(data: dict[str, Any], name: str, runs: Sequence[str] | None) -> dict[str, Any]:
    """`data` with only the runs named in `runs` (None: all) and the reference run."""
    if runs is None:
        return data
    keep = {*runs, *(TARGET_RULES[name][:1] if name in TARGET_RULES else ())}
    known = {r["name"] for r in data["runs"]}
    if unknown := sorted(set(runs) - known):
        raise ValueError(f"--runs: {', '.join(unknown)} not in scenario {name!r} (its runs: {', '.join(sorted(known))})")
    out = {**data, "runs": [r for r in data["runs"] if r["name"] in keep]}
    out["compare"] = [pair for pair in data.get("compare", []) if all(run in keep for run in pair)]
    return out


def variant_figures(name: str, variants: Sequence[str]) -> list[Figure]:
    """Each variant's time to the seed's target and final loss, against the scenario's reference run
    (the single process, the all-reduce) or, without one, its unchanged gossip run."""
    ref = TARGET_RULES[name][0] if name in TARGET_RULES else BASE_RUN
    figures = []
    for i, text in enumerate(variants, 1):
        run = variant_name(i)
        if name in ("single", "single16"):
            figures.append(Figure(f"{run} [{text}]: time to target / D", time_over_duration(run, ref)))
        elif name in TARGET_RULES:
            figures.append(Figure(f"{run} [{text}]/{ref} time to target", time_ratio(run, ref)))
        figures.append(Figure(f"{run} [{text}]/{ref} final loss", final_ratio(run, ref)))
        figures.append(Figure(f"{run} [{text}]'s mean model/{ref} final loss", mean_model_ratio(run, ref)))
    return figures


def spread(values: list[float | None]) -> dict[str, Any]:
    known = [v for v in values if v is not None and not math.isnan(v)]
    if not known:
        return {"median": None, "min": None, "max": None, "per_seed": values}
    return {"median": statistics.median(known), "min": min(known), "max": max(known), "per_seed": values}


def fmt(v: float | None) -> str:
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf"
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"


def markdown(figures: list[Figure], values: dict[str, list[float | None]], seeds: list[int]) -> str:
    head = ["figure", "median", "range", *(f"seed {s}" for s in seeds), "target", "holds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fig in figures:
        vals = values[fig.name]
        s = spread(vals)
        target = "" if fig.op is None else f"{fig.op} {fmt(fig.limit)}"
        held = [fig.holds(v) for v in vals if v is not None]  # None: a run `--runs` left out
        holds = "" if fig.op is None or not held else f"{sum(bool(h) for h in held)}/{len(held)}"
        cells = [fig.name, fmt(s["median"]), f"{fmt(s['min'])}–{fmt(s['max'])}", *(fmt(v) for v in vals), target, holds]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", required=True, choices=sorted(FIGURES))
    ap.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    ap.add_argument("--out", type=Path, default=None, help="write each seed's results and seeds.json here")
    ap.add_argument("--variant", action="append", default=[], metavar="[SECTION.]FIELD=VALUE[;...]",
                    help="an extra run: the scenario's gossip run with these settings changed (repeatable)")
    ap.add_argument("--world", default=None, metavar="[SECTION.]FIELD=VALUE[;...]",
                    help="change the scenario's world for every run, the reference run included")
    ap.add_argument("--runs", default=None, help="comma-separated runs to keep (default all; the reference run "
                    "that sets a seed's target and the variants are always kept)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    runs = None if args.runs is None else [r.strip() for r in args.runs.split(",") if r.strip()]
    if args.scenario == "tts":
        import gossip_tts.apps.simnet_models  # noqa: F401  (registers tts-tiny)
    if args.scenario not in builtin_scenarios():
        sys.exit(f"{args.scenario} is not a built-in scenario here")
    try:
        world = None if args.world is None else parse_variant(args.world, "--world")
        data = scenario_table(args.scenario, [parse_variant(v) for v in args.variant], runs, world)
    except ValueError as exc:
        sys.exit(str(exc))

    def emit(line: str) -> None:
        print(f"[{args.scenario}] {line}", file=sys.stderr, flush=True)

    print(describe(), flush=True)
    if args.world is not None:
        print(f"the world of every run changed: {args.world}", flush=True)
    figures = FIGURES[args.scenario] + variant_figures(args.scenario, args.variant)
    values: dict[str, list[float | None]] = {f.name: [] for f in figures}
    t0 = time.perf_counter()
    for seed in seeds:
        summary, timing, records = run_seed(args.scenario, seed, emit, data)
        emit(f"seed {seed} done after {time.perf_counter() - t0:.0f} s real\n{table(summary, timing)}")
        for fig in figures:
            values[fig.name].append(read_figure(fig, summary, timing))
        if args.out is not None:
            write_outputs(args.out / f"seed{seed}", records, summary, timing)
    print(f"\n{args.scenario}, seeds {','.join(map(str, seeds))} ({time.perf_counter() - t0:.0f} s real):\n")
    print(markdown(figures, values, seeds))
    result = {fig.name: spread(values[fig.name]) for fig in figures}
    if args.out is not None:
        (args.out / "seeds.json").write_text(json.dumps(clean(result), indent=2, sort_keys=True) + "\n", "utf-8")
    print(f"ratio: {json.dumps(clean(result), sort_keys=True)}")


if __name__ == "__main__":
    main()
