"""The peer's own mixing code on the head-to-head MLP with the machine taken out: N replicas in
lockstep in one process, no clock, no threads, no CPU shared with the protocol; beside it, with
the same batches, the methods built for a long publish period.

    python benchmarks/lockstep_peers.py [--peers 4] [--steps 200] [--seeds 0,1,2] [--every 1,16,64] [--no-late]
    python benchmarks/lockstep_peers.py --peers 2 --steps 810 --ddp-steps 705 --gossip-steps 565
    python benchmarks/lockstep_peers.py --every 1,16,64 --hidden 256 --batch 256 --steps 448 --no-late

Each replica is the head-to-head MLP (benchmarks/vs_workloads.py: 1.1M parameters, Adam, batch
1024; `--hidden` and `--batch` shrink it where a long run would not fit the machine). For each
publish period H of `--every`, with the same total steps (benchmarks/lockstep_arms.py):

- ``gossip``: every replica behind a real `GossipNode`, `BoundaryHook` and `Mixer` with the
  peer's defaults at `gossip_every` H (publishing, and pulling `SessionConfig().pulls` random
  others, every H steps); unless `--no-late`, also with each copy mixed a step later;
- ``gossip, per_period off``: the same with `GossipConfig.per_period` false, the rule before
  (identical at H = 1, so run only above it; with Adam in lockstep every copy comes from the
  round of the replica's own and Adam takes no partner steps, so above it the two differ only
  by the codec a publish is sent with at that period and its mixing rate, `peer.core.period_codec`);
- ``local SGD``: an exact average of the replicas' parameters every H steps;
- ``DiLoCo``: `async_opt.DiLoCoOuter` (published settings: lr 0.7, Nesterov momentum 0.9; see
  `--outer-lr`, `--outer-momentum`) on the mean pseudo-gradient every H steps, every replica
  restarting from the new global parameters; both keep each replica's Adam state;
- each `--variant`: gossip with those GossipConfig fields changed;

and, whatever H: the replicas alone, and DDP (one model stepping on the mean gradient of the N
replicas' batches). Score: the replicas' mean held-out loss over an arm's last 8 steps, and
`end`, after its last step (with the steps a multiple of H, where local SGD and DiLoCo have just
synchronised and their replicas hold the global model; gossip mixes a round's copies at the
boundary after it, so `--gossip-steps` one more than `--steps` scores it just after its last
mix); capture = (alone − arm) / (alone − DDP), the figure vs_ddp.py measures on real processes;
per H, gossip's capture over DiLoCo's, the long-period rule's target. Bytes one replica sends per
step: gossip's from the frames it sends; local SGD's, DiLoCo's and DDP's those of a ring
all-reduce (2(n−1)/n × the values × 4 bytes for fp32, 1 for int8, / H).

Capture falls with length (the step-size rule's larger step buys speed early, DDP's quieter
gradient a lower floor later): run for as many steps as a real run takes. `--ddp-steps` and
`--gossip-steps` give those arms the step counts a real run's processes got (each arm is scored
at its own end). Prints tables and last lines `result: {json}`, `ratio: {json}`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from lockstep_arms import DDP, TAIL_STEPS, Alone, Arm, Feed, Gossip, Outcome, Periodic, run  # noqa: E402
from machine import describe  # noqa: E402
from vs_ddp import gossip_fields  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

from async_opt.sync import DiLoCoOuter  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402

GOSSIP, CONTROL, LOCAL, DILOCO = "gossip", "gossip, per_period off", "local SGD", "DiLoCo"


def build_arms(w: MLPWorkload, feed: Feed, a: argparse.Namespace, every: list[int]) -> dict[tuple[int, str], Arm]:
    """Every arm of one seed's run, keyed (H, name); H 0 for alone and DDP."""
    n, steps = a.peers, a.steps
    arms: dict[tuple[int, str], Arm] = {(0, "alone"): Alone(w, feed, n, steps),
                                        (0, "DDP"): DDP(w, feed, n, a.ddp_steps or steps)}
    for h in every:
        configs = {GOSSIP: GossipConfig(swarm="lockstep", gossip_every=h)}
        if h > 1:
            configs[CONTROL] = GossipConfig(swarm="lockstep", gossip_every=h, per_period=False)
        configs.update({f"gossip [{v}]": GossipConfig(swarm="lockstep", gossip_every=h, **gossip_fields(v))
                        for v in a.variant})
        for name, cfg in configs.items():
            for late in (False,) if a.no_late else (False, True):
                arms[h, f"{name}, late" if late else name] = Gossip(w, feed, n, a.gossip_steps or steps, cfg, late,
                                                                    w.seed)
        arms[h, LOCAL] = Periodic(w, feed, n, steps, h, None)
        arms[h, DILOCO] = Periodic(w, feed, n, steps, h, DiLoCoOuter(a.outer_lr, a.outer_momentum, nesterov=True))
    return arms


def wire_text(wire: dict[str, float]) -> str:
    return ", ".join(f"{k} {v / 1e3:,.1f} kB" for k, v in wire.items()) or "0"


def capture(alone: float, ddp: float, arm: float) -> float:
    return (alone - arm) / (alone - ddp) if alone != ddp else float("nan")


def over(gossip: float, diloco: float) -> float | None:
    """Gossip's capture over DiLoCo's; None where DiLoCo gained nothing over alone (no ratio to take)."""
    return gossip / diloco if diloco > 0 else None


def fmt(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--every", default="1", help="publish periods H, comma-separated (default 1)")
    ap.add_argument("--ddp-steps", type=int, default=0, help="steps of the DDP arm (default: --steps)")
    ap.add_argument("--gossip-steps", type=int, default=0, help="steps of every gossip arm (default: --steps)")
    ap.add_argument("--no-late", action="store_true", help="skip each gossip arm's late twin (copies mixed a step later)")
    ap.add_argument("--variant", action="append", default=[], metavar="FIELD=VALUE[;...]",
                    help="an extra gossip arm at each H with these GossipConfig fields changed (repeatable)")
    ap.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo's outer learning rate (published: 0.7)")
    ap.add_argument("--outer-momentum", type=float, default=0.9, help="DiLoCo's outer Nesterov momentum (published: 0.9)")
    ap.add_argument("--hidden", type=int, default=0, help="the MLP's hidden width (default: the workload's 1024)")
    ap.add_argument("--batch", type=int, default=0, help="batch per replica (default: the workload's 1024)")
    a = ap.parse_args(argv)
    every = sorted({int(h) for h in a.every.split(",")})
    if min(a.steps, a.ddp_steps or a.steps, a.gossip_steps or a.steps) < TAIL_STEPS or min(every) < 1:
        ap.error(f"every arm needs at least {TAIL_STEPS} steps (its score is the mean over its last {TAIL_STEPS}) "
                 "and every H must be >= 1")
    torch.set_num_threads(1)
    print(describe())
    sizes = {k: v for k, v in (("hidden", a.hidden), ("batch_size", a.batch)) if v}
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"{dataclasses.replace(MLPWorkload(), **sizes).describe()}; {a.peers} replicas; steps: {a.steps} "
          f"(DDP {a.ddp_steps or a.steps}, gossip {a.gossip_steps or a.steps}); H: {', '.join(map(str, every))}; "
          f"DiLoCo outer lr {a.outer_lr}, momentum {a.outer_momentum}")
    if cut := [h for h in every if a.steps % h]:
        print(f"note: {a.steps} steps is not a multiple of H = {cut}: the last period is cut short")
    result: dict[str, dict[str, dict[str, Any]]] = {}
    started = time.perf_counter()
    for seed in seeds:
        w = dataclasses.replace(MLPWorkload(seed=seed), **sizes)
        feed = Feed(w)
        outcomes: dict[tuple[int, str], Outcome] = run(feed, a.peers, build_arms(w, feed, a, every))
        (alone, end_alone), (ddp, end_ddp) = ((outcomes[0, k].loss, outcomes[0, k].end) for k in ("alone", "DDP"))
        print(f"\nseed {seed} ({time.perf_counter() - started:.0f} s so far)\n| H | arm | loss | capture of DDP's gain | "
              "end | capture at end | bytes/replica/step | step scale |\n|---|---|---|---|---|---|---|---|")
        for (h, name), out in outcomes.items():
            row = {"loss": out.loss, "capture": capture(alone, ddp, out.loss), "end": out.end,
                   "end_capture": capture(end_alone, end_ddp, out.end), "wire": out.wire}
            result.setdefault(str(h), {}).setdefault(name, {})[str(seed)] = row
            print(f"| {h or '—'} | {name} | {out.loss:.6f} | {row['capture']:.2f} | {out.end:.6f} | "
                  f"{row['end_capture']:.2f} | {wire_text(out.wire)} | {fmt(out.extra.get('step_scale'))} |", flush=True)
    ratio = summary(result, seeds, every)
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    print("result: " + json.dumps(result))
    print("ratio: " + json.dumps(ratio))
    return {"result": result, "ratio": ratio}


def summary(result: dict[str, dict[str, dict[str, Any]]], seeds: list[int], every: list[int]) -> dict[str, object]:
    """Per H and arm: capture per seed and its mean; gossip's capture over DiLoCo's per seed."""
    print(f"\nover seeds {', '.join(map(str, seeds))}\n| H | arm | capture per seed | mean | capture at end per seed "
          "| mean | bytes/replica/step |\n|---|---|---|---|---|---|---|")
    for h, arms in result.items():
        for name, by_seed in arms.items():
            rows = [by_seed[str(s)] for s in seeds]
            tail, end = [r["capture"] for r in rows], [r["end_capture"] for r in rows]
            print(f"| {h if h != '0' else '—'} | {name} | {', '.join(f'{c:.2f}' for c in tail)} | {statistics.mean(tail):.2f} | "
                  f"{', '.join(f'{c:.2f}' for c in end)} | {statistics.mean(end):.2f} | {wire_text(rows[0]['wire'])} |")
    print("\n| H | gossip / DiLoCo capture, per seed | of the means | at end, per seed | of the means "
          "| per_period off / DiLoCo, per seed | at end |\n|---|---|---|---|---|---|---|")
    ratio: dict[str, object] = {}
    for h in every:
        arms, out = result[str(h)], {}
        for key in ("capture", "end_capture"):
            cap = {name: [arms[name][str(s)][key] for s in seeds] for name in (GOSSIP, CONTROL, DILOCO) if name in arms}
            out[key] = {"gossip_over_diloco": [over(g, d) for g, d in zip(cap[GOSSIP], cap[DILOCO])],
                        "of_means": over(statistics.mean(cap[GOSSIP]), statistics.mean(cap[DILOCO])),
                        "control_over_diloco": [over(g, d) for g, d in zip(cap.get(CONTROL, []), cap[DILOCO])],
                        "captures": cap}
        tail, end = out["capture"], out["end_capture"]
        print(f"| {h} | {', '.join(map(fmt, tail['gossip_over_diloco']))} | {fmt(tail['of_means'])} | "
              f"{', '.join(map(fmt, end['gossip_over_diloco']))} | {fmt(end['of_means'])} | "
              f"{', '.join(map(fmt, tail['control_over_diloco'])) or '= gossip'} | "
              f"{', '.join(map(fmt, end['control_over_diloco'])) or '= gossip'} |")
        ratio[str(h)] = out
    print("(—: DiLoCo gained nothing over the replicas alone there, so there is no ratio)")
    return ratio


if __name__ == "__main__":
    main()
