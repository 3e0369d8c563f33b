"""gossip-tts against torch DDP and a single process: one workload, one machine, one budget.

    python benchmarks/vs_ddp.py [--workload mlp|tts] [--peers 4] [--budget 60] [--slow-factor 4] [--compression int8] [--plot PNG | --plot '']
    python benchmarks/vs_ddp.py --workload tts --split --peers 2 [--budget 120]
    python benchmarks/vs_ddp.py --peers 2 --arms ddp,gossip,alone --variant gossip_every=4 [--variant ...]

Arms, one at a time, each N OS processes on 127.0.0.1 in a process group of its own: a single
process; N-process DDP (gloo, loopback); the same with one process slowed `--slow-factor`
times (a sleep after each step); N real gossip-tts peers, with and without that straggler;
and the same N peers training alone (no gossip). Every arm trains the same `--workload`
(vs_workloads.py: the ~1M-parameter MLP, or the tiny TTS preset on the built-in corpus), one
torch thread per process, for `--budget` seconds of wall clock after a common start. Loss is
on one held-out set, mean over processes.

With `--split` (TTS only) each process of a multi-process arm holds only its own part of the
training clips (whole speakers), the single process all of them, and the straggler arms are left
out: the figure is how much of the single process's lead over a peer trained on its part alone
the gossip peers close, (alone − gossip) / (alone − single), printed as
`gossip_gap_closed_of_single`, and again with the single process read after as many steps as
each lone peer took (`lead_of_single_at_equal_steps`, `gossip_gap_closed_of_single_at_equal_steps`):
the single process has a core to itself, so at the budget part of its lead is steps.

`--arms` keeps only the arms named (single, ddp, ddp-straggler, gossip, gossip-straggler,
alone); each `--variant FIELD=VALUE[;FIELD=VALUE]` adds a gossip arm with those GossipConfig
fields changed, its capture of DDP's gain (with `--split`: the share of the lead it closes, at
the budget and at equal steps) printed beside the default's.

Prints the machine, a markdown table, the equal-samples plot's path (loss against samples
consumed by all processes; skipped without matplotlib), and a last line `ratio: {json}`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import sys
import typing
from pathlib import Path
from typing import Callable, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

from vs_common import (Clock, IterateAverage, ProcessGroup, Record, Workload, arg_parser, evaluate, held_out_loss,  # noqa: E402
                       run_arms, single_arm_launcher, train_step)
from vs_workloads import load_workload, make_workload, workload_json  # noqa: E402
from vs_report import plot_equal_samples, report  # noqa: E402

from gossip_tts.cli.config_values import ValueProblem, coerce  # noqa: E402  (vs_common put the repo on the path)
from peer.core.gossip_config import GossipConfig  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PLOT_SUFFIX = {"mlp": "", "tts": "_tts"}


def ddp_worker(w: Workload, run_dir: Path, rank: int, world: int, port: int, budget_s: float, evals: int,
               slow_factor: float) -> None:
    """One DDP rank. Rank 0's clock decides when to evaluate and when to stop (broadcast each
    step), so every rank runs the same number of steps and none hangs in an all-reduce."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    task = w.task(rank)
    model = nn.parallel.DistributedDataParallel(w.build_model())
    opt = w.optimizer()(model.parameters())
    rec, clock, average = Record(rank), Clock(run_dir, rank, budget_s, evals), IterateAverage(model.module)
    clock.wait_for_go()
    flags = torch.zeros(2)
    while True:
        if rank == 0:
            flags[0], flags[1] = float(clock.over()), float(clock.eval_due())
        dist.broadcast(flags, 0)
        if flags[1] or flags[0]:
            evaluate(rec, clock.elapsed(), task, model.module, average)
        if flags[0]:
            break
        train_step(model, opt, task, rec, w, slow_factor)
        average.observe(model.module, rec.steps)
    rec.write(run_dir / f"rank{rank}.json", clock, nn.utils.parameters_to_vector(model.module.parameters()))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_launcher(w: Workload, n: int, budget_s: float, evals: int, slow_factor: float) -> Callable[[ProcessGroup, Path], int]:
    def launch(group: ProcessGroup, run_dir: Path) -> int:
        port = free_port()
        for rank in range(n):
            group.spawn([sys.executable, __file__, "--worker", "--run-dir", str(run_dir), "--rank", str(rank),
                         "--world", str(n), "--port", str(port), "--budget", str(budget_s), "--evals", str(evals),
                         "--workload-json", workload_json(w),
                         "--slow-factor", str(slow_factor if rank == n - 1 else 1.0)], run_dir / f"ddp{rank}.log")
        return n
    return launch


def run(a: argparse.Namespace) -> None:
    from machine import describe
    from vs_gossip_peer import gossip_arm_launcher

    if a.split and a.workload != "tts":
        raise SystemExit("--split needs --workload tts (the MLP draws fresh samples, it has no corpus to split)")
    whole, n, b, e = make_workload(a.workload, a.seed), a.peers, a.budget, a.evals
    w = dataclasses.replace(whole, parts=n) if a.split else whole  # what each process of a multi-process arm holds
    codec = {"compression": a.compression} if a.compression else {}
    print(describe())
    print(f"workload: {w.describe()}, 1 torch thread/process; "
          f"{n} processes/arm, budget {b:.0f} s wall clock/arm, gossip codec {a.compression or 'the peer default'}, "
          + ("the single process holding every clip, no straggler arms" if a.split else f"straggler x{a.slow_factor}"),
          flush=True)
    arms = [
        Arm("single", "single", single_arm_launcher(whole, b, e)),
        Arm("ddp", f"ddp x{n}", ddp_launcher(w, n, b, e, 1.0)),
        Arm("ddp-straggler", f"ddp x{n} straggler", ddp_launcher(w, n, b, e, a.slow_factor)),
        Arm("gossip", f"gossip x{n}", gossip_arm_launcher(w, n, b, e, gossip=codec)),
        Arm("gossip-straggler", f"gossip x{n} straggler",
            gossip_arm_launcher(w, n, b, e, slow_factor=a.slow_factor, gossip=codec)),
        Arm("alone", f"alone x{n}", gossip_arm_launcher(w, n, b, e, alone=True)),
    ]
    arms += [Arm(VARIANT, f"gossip x{n} [{v}]", gossip_arm_launcher(w, n, b, e, gossip={**codec, **gossip_fields(v)}))
             for v in a.variant]
    if a.split:
        arms = [arm for arm in arms if arm.kind not in STRAGGLER_KINDS]
    if a.arms:
        arms = select_arms(arms, a.arms)
    results = run_arms([(arm.name, arm.launch) for arm in arms], "vs_ddp_", b, score=lambda flat: held_out_loss(w, flat))
    plot = a.plot if a.plot is not None else str(REPO / f"docs/img/bench/vs_ddp_equal_samples{PLOT_SUFFIX[a.workload]}.png")
    print("\n" + plot_equal_samples(results, Path(plot), f"{a.workload} workload, {n} processes per arm, {b:.0f} s each") if plot else "\nplot skipped: --plot ''")
    g, d, s, alone = f"gossip x{n}", f"ddp x{n}", "single", f"alone x{n}"
    variants = [arm.name for arm in arms if arm.kind == VARIANT]
    reference, figure = (s, "gap_closed_of_single") if a.split else (d, "gain_captured_of_ddp")
    report(results, a.target, {"loss_gossip_over_ddp": (g, d), "loss_gossip_over_single": (g, s),
                               "loss_gossip_over_alone": (g, alone), "loss_ddp_over_single": (d, s),
                               "loss_alone_over_single": (alone, s),
                               "loss_gossip_straggler_over_ddp_straggler": (f"{g} straggler", f"{d} straggler")},
           {"peers": n, "budget_s": b, "split": a.split},
           {"gossip_gain_captured_of_ddp": (g, d, alone), "gossip_gap_closed_of_single": (g, s, alone),
            **{f"{v}_{figure}": (v, reference, alone) for v in variants}},
           equal_steps=(s, alone, {"gossip": g, **{v: v for v in variants}}) if a.split else None)


ARM_KINDS = ("single", "ddp", "ddp-straggler", "gossip", "gossip-straggler", "alone")
"""What `--arms` names; every arm is one of these or a `--variant`."""
STRAGGLER_KINDS = ("ddp-straggler", "gossip-straggler")
VARIANT = "variant"


class Arm(NamedTuple):
    kind: str
    """One of ARM_KINDS, or VARIANT."""
    name: str
    """As the table prints it ("ddp x4 straggler")."""
    launch: Callable[[ProcessGroup, Path], int]


def select_arms(arms: list[Arm], wanted: str) -> list[Arm]:
    """The arms of the kinds named in `wanted` (comma-separated ARM_KINDS), every variant kept."""
    keep = {k.strip() for k in wanted.split(",") if k.strip()}
    if unknown := keep - set(ARM_KINDS):
        raise SystemExit(f"--arms: unknown {sorted(unknown)}; choose from {', '.join(ARM_KINDS)}")
    return [arm for arm in arms if arm.kind in keep or arm.kind == VARIANT]


def gossip_fields(variant: str) -> dict[str, object]:
    """`gossip_every=4;pull_only=false` -> GossipConfig fields, each value read as the peer's own
    settings read it (`gossip_tts.cli.config_values.coerce`); `;` separates fields because specs such
    as `staleness` hold commas."""
    types = typing.get_type_hints(GossipConfig)
    out: dict[str, object] = {}
    for item in variant.split(";"):
        key, sep, raw = item.partition("=")
        if not sep or key not in types:
            raise SystemExit(f"--variant {variant!r}: {key!r} is not a GossipConfig field=value")
        try:
            out[key] = coerce(raw, types[key])
        except ValueProblem as exc:
            raise SystemExit(f"--variant {variant!r}: {key}: {exc}") from None
    return out

if __name__ == "__main__":
    ap = arg_parser(__doc__)
    ap.add_argument("--slow-factor", type=float, default=4.0, help="how much slower the straggler is")
    ap.add_argument("--plot", default=None,
                    help="where the equal-samples plot goes ('' for none; default docs/img/bench/vs_ddp_equal_samples[_tts].png)")
    ap.add_argument("--split", action="store_true",
                    help="TTS: each process of a multi-process arm holds only its part of the training clips, the single process all")
    ap.add_argument("--arms", default="", help=f"comma-separated arms to run (default all): {', '.join(ARM_KINDS)}")
    ap.add_argument("--variant", action="append", default=[], metavar="FIELD=VALUE[;...]",
                    help="an extra gossip arm with these GossipConfig fields changed (repeatable)")
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        ddp_worker(load_workload(args.workload_json), args.run_dir, args.rank, args.world, args.port,
                   args.budget, args.evals, args.slow_factor)
    else:
        run(args)
