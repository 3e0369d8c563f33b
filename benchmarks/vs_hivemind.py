"""gossip-tts against hivemind.Optimizer and a single process: one workload, machine and budget.

    python benchmarks/vs_hivemind.py [--workload mlp|tts] [--peers 4] [--budget 60] [--compression int8]

hivemind never enters the project's environment (its protobuf conflicts with the dac extra):
this script builds, or reuses, a venv of its own (--venv, default
/tmp/gossip-tts-hivemind-venv) with the torch CPU build first, then hivemind 1.1.12, then
numpy<2.4 (hivemind's 8-bit quantisation breaks on numpy 2.4), and runs hivemind's workers
with that venv's python. If the venv cannot be built, the hivemind arms are reported failed,
saying why, and the other arms still run.

Arms, one at a time, each in a process group of its own on 127.0.0.1: a single process;
N hivemind.Optimizer peers with hivemind's defaults (target_batch_size = N × batch, so one
hivemind epoch is one DDP step's worth of samples) and again with target_group_size=N; N
gossip-tts peers; the same N peers alone. Every arm trains the same `--workload`
(vs_workloads.py). hivemind peers listen on /ip4/127.0.0.1 only, with
no IPFS, relays or NAT probing, client_mode off, bootstrapped from the first peer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

from vs_common import (Clock, IterateAverage, ProcessGroup, Record, Workload, arg_parser, evaluate, held_out_loss,  # noqa: E402
                       run_arms, single_arm_launcher, train_step)
from vs_workloads import load_workload, make_workload, workload_json  # noqa: E402
from vs_report import report  # noqa: E402

VENV = Path("/tmp/gossip-tts-hivemind-venv")
INSTALL_STEPS = (["torch==2.13.0"], ["hivemind==1.1.12", "safetensors"], ["numpy<2.4"])
"""In this order: torch first so hivemind does not pull a CUDA build; numpy last to undo its upgrade.
safetensors: the workers share vs_common, which writes each process's last parameters with it."""
MADDR_FILE = "maddrs.json"


def ensure_venv(venv: Path) -> tuple[Path | None, str]:
    """The venv's python once hivemind imports there, or None and why (pip's own last words)."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c",
             "import hivemind, numpy, safetensors; assert tuple(map(int, numpy.__version__.split('.')[:2])) < (2, 4)"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python, f"reused {venv}"
    if not python.exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode:
            return None, f"python -m venv {venv} failed: {made.stderr.strip()[-500:]}"
    for pkgs in INSTALL_STEPS:
        print(f"pip install {' '.join(pkgs)} into {venv} ...", file=sys.stderr, flush=True)
        pip = subprocess.run([str(python), "-m", "pip", "install", "-q", *pkgs], capture_output=True, text=True)
        if pip.returncode:
            return None, f"pip install {' '.join(pkgs)} failed: {(pip.stderr or pip.stdout).strip()[-800:]}"
    check = subprocess.run(probe, capture_output=True, text=True)
    if check.returncode:
        return None, f"hivemind installed but does not import: {check.stderr.strip()[-800:]}"
    return python, f"built {venv}"


def hivemind_worker(a: argparse.Namespace) -> None:
    """One hivemind peer, run by the venv's python: the project is not installed there (the tts
    workload imports only gossip_tts.model, torch only, through the repository root on sys.path)."""
    import hivemind

    torch.set_num_threads(1)
    w = load_workload(a.workload_json)
    initial = json.loads(a.initial_peers)
    dht = hivemind.DHT(initial_peers=initial, start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"], use_ipfs=False,
                       use_relay=False, use_auto_relay=False, auto_nat=False, nat_port_map=False,
                       client_mode=False)
    if a.rank == 0:
        maddrs = [str(m) for m in dht.get_visible_maddrs()]
        (a.run_dir / (MADDR_FILE + ".tmp")).write_text(json.dumps(maddrs))
        (a.run_dir / (MADDR_FILE + ".tmp")).rename(a.run_dir / MADDR_FILE)
    task = w.task(a.rank)
    model = w.build_model()
    opts = {"averager_opts": {"target_group_size": a.world}} if a.group_size else {}
    opt = hivemind.Optimizer(dht=dht, run_id="bench-vs", target_batch_size=a.target_batch_size or a.world * w.batch_size,
                             batch_size_per_step=w.batch_size, optimizer=w.optimizer(),
                             params=model.parameters(), client_mode=False, verbose=False, **opts)
    rec, clock, average = Record(a.rank), Clock(a.run_dir, a.rank, a.budget, a.evals), IterateAverage(model)
    clock.wait_for_go()
    while not clock.over():
        if clock.eval_due():
            evaluate(rec, clock.elapsed(), task, model, average)
        train_step(model, opt, task, rec, w)
        average.observe(model, rec.steps)
    evaluate(rec, clock.elapsed(), task, model, average)
    rec.extra = {"epochs": float(opt.local_epoch)}
    rec.write(a.run_dir / f"rank{a.rank}.json", clock, torch.nn.utils.parameters_to_vector(model.parameters()))
    opt.shutdown()
    dht.shutdown()


def hivemind_launcher(python: Path | None, why: str, w: Workload, n: int, budget_s: float, evals: int,
                      group_size: bool, target_batch_size: int | None = None) -> Callable[[ProcessGroup, Path], int]:
    def launch(group: ProcessGroup, run_dir: Path) -> int:
        if python is None:
            raise RuntimeError(f"hivemind unavailable: {why}")
        initial: list[str] = []
        for rank in range(n):
            cmd = [str(python), __file__, "--worker", "--run-dir", str(run_dir), "--rank", str(rank), "--world", str(n),
                   "--budget", str(budget_s), "--evals", str(evals), "--workload-json", workload_json(w),
                   "--initial-peers", json.dumps(initial)] + (["--group-size"] if group_size else [])
            cmd += ["--target-batch-size", str(target_batch_size)] if target_batch_size else []
            group.spawn(cmd, run_dir / f"hivemind{rank}.log")
            if rank == 0:
                initial = _wait_maddrs(run_dir, group.procs[0])
        return n
    return launch


def _wait_maddrs(run_dir: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (run_dir / MADDR_FILE).exists():
            return json.loads((run_dir / MADDR_FILE).read_text())
        if proc.poll() is not None:
            raise RuntimeError(f"hivemind peer 0 exited ({proc.returncode}): {(run_dir / 'hivemind0.log').read_text()[-1500:]}")
        time.sleep(0.1)
    raise RuntimeError(f"hivemind peer 0 gave no address within {timeout_s} s")


def run(a: argparse.Namespace) -> None:
    from machine import describe
    from vs_gossip_peer import gossip_arm_launcher

    w, n, b, e = make_workload(a.workload, a.seed), a.peers, a.budget, a.evals
    codec = {"compression": a.compression} if a.compression else {}
    print(describe())
    python, why = ensure_venv(a.venv)
    print(f"hivemind venv: {why}")
    print(f"workload: {w.describe()}, 1 torch thread/process; "
          f"{n} processes/arm, budget {b:.0f} s wall clock/arm, gossip codec {a.compression or 'the peer default'}", flush=True)
    arms = [("single", single_arm_launcher(w, b, e)),
            (f"hivemind x{n} defaults", hivemind_launcher(python, why, w, n, b, e, False, a.target_batch_size)),
            (f"hivemind x{n} target_group_size={n}", hivemind_launcher(python, why, w, n, b, e, True, a.target_batch_size)),
            (f"gossip x{n}", gossip_arm_launcher(w, n, b, e, gossip=codec)),
            (f"alone x{n}", gossip_arm_launcher(w, n, b, e, alone=True))]
    results = run_arms(arms, "vs_hivemind_", b, score=lambda flat: held_out_loss(w, flat))
    g = f"gossip x{n}"
    report(results, a.target, {"loss_gossip_over_hivemind_defaults": (g, f"hivemind x{n} defaults"),
                               "loss_gossip_over_hivemind_group": (g, f"hivemind x{n} target_group_size={n}"),
                               "loss_gossip_over_single": (g, "single"), "loss_gossip_over_alone": (g, f"alone x{n}")},
           {"peers": n, "budget_s": b, "hivemind": python is not None})


if __name__ == "__main__":
    ap = arg_parser(__doc__)
    ap.add_argument("--venv", type=Path, default=VENV, help="hivemind's own venv (built when missing)")
    ap.add_argument("--target-batch-size", type=int, default=None,
                    help="hivemind's samples per epoch (default: peers x the batch, one DDP step's worth)")
    ap.add_argument("--initial-peers", default="[]", help=argparse.SUPPRESS)
    ap.add_argument("--group-size", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    hivemind_worker(args) if args.worker else run(args)
