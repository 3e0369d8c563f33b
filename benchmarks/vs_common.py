"""What the head-to-head benchmarks (vs_ddp.py, vs_hivemind.py) share: arms of N OS processes
in one process group, the common start, the training step and the averaged weights every arm
keeps, and the machine load during each arm. The workloads themselves are in vs_workloads.py.

Imports only torch, the standard library, the project's pure `async_opt` and, through
vs_workloads for the tts workload, `gossip_tts.model` (both torch only, found through the
repository root on sys.path): hivemind's workers run this module from a venv of their own that
never has the project installed.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from safetensors.torch import load_file, save_file
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from async_opt.averaging import PowerEma  # noqa: E402
from vs_load import GroupCPUMeter, others_load, read_busy  # noqa: E402
from vs_workloads import KINDS, Task, Workload, load_workload, workload_json  # noqa: E402

AVERAGE_EVERY = 1
AVERAGE_SIGMA_REL = 0.1
"""How every arm keeps its averaged weights: the peer's own rule (a power-function EMA of width
σ_rel, sampled at the fewest steps per publish when `PowerEma.due`; peer.core.average) at the peer's
defaults (GossipConfig.period_floor and average_sigma_rel; a test holds them equal). A gossip peer
averages its swarm estimate; every other arm averages its own parameters."""


# ---------------------------------------------------------------------------- one worker's record
@dataclass
class Record:
    """What one process of an arm reports: its loss curve against its own samples and time."""

    rank: int
    curve: list[tuple[float, int, float]] = field(default_factory=list)
    """(seconds since the common start, samples this process consumed, held-out loss)."""
    samples: int = 0
    steps: int = 0
    cpu_s: float = 0.0
    """User + system CPU seconds of this process (all its threads) from the go signal on."""
    extra: dict = field(default_factory=dict)
    averaged: list[tuple[float, int, float]] = field(default_factory=list)
    """(seconds, samples, held-out loss of the averaged weights) at the same evaluations as `curve`."""

    def write(self, path: Path, clock: "Clock", final: torch.Tensor | None = None) -> None:
        """The record, and beside it (`final_params_path`) the process's last parameters when given,
        written first: a record's presence says both are complete."""
        self.cpu_s = cpu_seconds_self() - clock.cpu0
        if final is not None:
            save_file({"flat": final.detach().float().contiguous()}, str(final_params_path(path)))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.rename(path)  # readers never see half a record


def final_params_path(record: Path) -> Path:
    return record.with_suffix(".final.safetensors")


def mean_final_params(records: Sequence[Path]) -> torch.Tensor | None:
    """The mean of an arm's processes' last parameters (None unless every process wrote them):
    the model the arm's peers agree on, whose loss against theirs is what their disagreement costs."""
    paths = [final_params_path(p) for p in records]
    if not paths or not all(p.exists() for p in paths):
        return None
    return torch.stack([load_file(str(p))["flat"] for p in paths]).mean(0)


def held_out_loss(w: "Workload", flat: torch.Tensor) -> float:
    """The held-out loss of parameters `flat` of workload `w`'s model (the set every arm is scored on)."""
    model = w.build_model()
    nn.utils.vector_to_parameters(flat, model.parameters())
    return w.task(0).eval_loss(model)


def cpu_seconds_self() -> float:
    t = os.times()
    return t.user + t.system


class Clock:
    """The common start (a barrier through files) and the wall-clock budget of one worker.

    Every worker writes `ready.<rank>`, then waits for the parent's `go` file holding the start
    time: start-up (imports, DHT, handshakes) is outside the budget, for every arm alike."""

    def __init__(self, run_dir: Path, rank: int, budget_s: float, evals: int,
                 on_go: Callable[[], None] | None = None) -> None:
        """`on_go`: called at the common start (a gossip worker starts its per-thread CPU meter there)."""
        self.run_dir, self.rank, self.budget_s = run_dir, rank, budget_s
        self.on_go = on_go
        self.eval_every = budget_s / max(evals, 1)
        self.t0 = 0.0
        self.cpu0 = 0.0
        self._next_eval = 0.0

    def wait_for_go(self) -> None:
        (self.run_dir / f"ready.{self.rank}").write_text("1")
        go = self.run_dir / "go"
        while not go.exists():
            time.sleep(0.05)
        self.t0 = float(go.read_text())
        time.sleep(max(0.0, self.t0 - time.time()))
        self.cpu0 = cpu_seconds_self()
        if self.on_go is not None:
            self.on_go()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def over(self) -> bool:
        return self.elapsed() >= self.budget_s

    def eval_due(self) -> bool:
        if self.elapsed() >= self._next_eval:
            self._next_eval += self.eval_every
            return True
        return False


class IterateAverage:
    """The averaged weights of an arm without a peer: its own parameters, by the peer's rule."""

    def __init__(self, model: nn.Module) -> None:
        import copy

        self.ema = PowerEma(AVERAGE_SIGMA_REL)
        self.probe = copy.deepcopy(model)

    def observe(self, model: nn.Module, step: int) -> None:
        """After a step: sample the parameters every AVERAGE_EVERY steps, when the average is due one."""
        if step % AVERAGE_EVERY == 0 and self.ema.due(step):
            self.ema.update(nn.utils.parameters_to_vector(model.parameters()).detach(), step)

    def loss(self, task: Task, flat: torch.Tensor | None = None) -> float:
        """Held-out loss of `flat` (default: this average; NaN before its first sample)."""
        flat = self.ema.value if flat is None else flat
        if flat is None:
            return float("nan")
        nn.utils.vector_to_parameters(flat, self.probe.parameters())
        return task.eval_loss(self.probe)


def evaluate(rec: Record, t: float, task: Task, model: nn.Module, average: IterateAverage,
             averaged: torch.Tensor | None = None) -> None:
    """Record the held-out loss of the live and of the averaged weights (`averaged`, else the
    arm's own iterate average)."""
    rec.curve.append((t, rec.samples, task.eval_loss(model)))
    rec.averaged.append((t, rec.samples, average.loss(task, averaged)))


def straggle(step_s: float, slow_factor: float) -> None:
    """Make this process `slow_factor` times slower than it is (a sleep after each step)."""
    if slow_factor > 1:
        time.sleep((slow_factor - 1) * step_s)


def train_step(model: nn.Module, opt: Any, task: Task, rec: Record, w: Workload, slow_factor: float = 1.0) -> float:
    """One optimiser step on a fresh batch (any optimiser with zero_grad/step: torch's or
    hivemind's), the gradient clipped where the workload says; the straggler then sleeps.
    Returns the batch loss."""
    t = time.perf_counter()
    batch = task.batch()
    opt.zero_grad()
    loss = task.loss(model, batch)
    loss.backward()
    if w.grad_clip:
        nn.utils.clip_grad_norm_(model.parameters(), w.grad_clip)
    opt.step()
    rec.samples += w.batch_size
    rec.steps += 1
    straggle(time.perf_counter() - t, slow_factor)
    return float(loss.detach())


def plain_worker(w: Workload, run_dir: Path, rank: int, budget_s: float, evals: int, slow_factor: float = 1.0) -> None:
    """One process training alone: the single-process arm."""
    torch.set_num_threads(1)
    task = w.task(rank)
    model = w.build_model()
    opt = w.optimizer()(model.parameters())
    rec, average = Record(rank), IterateAverage(model)
    clock = Clock(run_dir, rank, budget_s, evals)
    clock.wait_for_go()
    while not clock.over():
        if clock.eval_due():
            evaluate(rec, clock.elapsed(), task, model, average)
        train_step(model, opt, task, rec, w, slow_factor)
        average.observe(model, rec.steps)
    evaluate(rec, clock.elapsed(), task, model, average)
    rec.write(run_dir / f"rank{rank}.json", clock, nn.utils.parameters_to_vector(model.parameters()))


# ---------------------------------------------------------------------------- one arm
@dataclass
class ArmResult:
    name: str
    records: list[dict]
    wall_s: float
    others_cores: float
    """Average cores other processes kept busy during the arm (the noise behind its numbers)."""
    own_cpu_s: float
    failed: str = ""
    mean_model_loss: float = math.nan
    """Held-out loss of the mean of the processes' last parameters (NaN: not scored)."""


class ProcessGroup:
    """N worker processes in one process group of their own, killed only through that group."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.pgid: int | None = None

    def spawn(self, cmd: Sequence[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        group = 0 if self.pgid is None else self.pgid
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env or {})}
        p = subprocess.Popen(list(cmd), stdout=open(log, "w"), stderr=subprocess.STDOUT, env=full_env, process_group=group)
        if self.pgid is None:
            self.pgid = p.pid
        self.procs.append(p)
        return p

    def kill(self, grace_s: float = 10.0) -> None:
        if self.pgid is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
                time.sleep(0.1)


def run_arm(name: str, launch: Callable[[ProcessGroup, Path], int], run_dir: Path, budget_s: float,
            startup_timeout_s: float = 180.0, score: Callable[[torch.Tensor], float] | None = None) -> ArmResult:
    """Start an arm (`launch` spawns its workers and returns how many), release them together,
    collect their records, and always kill the group. The load is measured from the go signal
    to the last record, so start-up and tear-down do not count as anyone's noise. `score`, when
    given, scores the mean of the processes' last parameters (after the group is gone)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    group = ProcessGroup()
    try:
        n = launch(group, run_dir)
        deadline = time.monotonic() + startup_timeout_s
        while sum((run_dir / f"ready.{r}").exists() for r in range(n)) < n:
            dead = [p.returncode for p in group.procs if p.poll() not in (None, 0)]
            if dead or time.monotonic() > deadline:
                return ArmResult(name, [], 0.0, float("nan"), 0.0, failed=_why(run_dir, dead))
            time.sleep(0.1)
        assert group.pgid is not None
        busy0, meter, w0 = read_busy(), GroupCPUMeter(group.pgid), time.time()
        t0 = w0 + 1.0
        (run_dir / "go.tmp").write_text(repr(t0))
        (run_dir / "go.tmp").rename(run_dir / "go")  # a worker never reads a half-written go time
        deadline = time.monotonic() + budget_s + 120
        paths = [run_dir / f"rank{r}.json" for r in range(n)]
        while not all(p.exists() for p in paths):
            dead = [p.returncode for p in group.procs if p.poll() not in (None, 0)]
            if dead or time.monotonic() > deadline:
                return ArmResult(name, [], 0.0, float("nan"), 0.0, failed=_why(run_dir, dead))
            meter.sample()
            time.sleep(0.2)
        meter.sample()
        wall = time.time() - t0
        records = [json.loads(p.read_text()) for p in paths]
        busy, load_wall = read_busy() - busy0, time.time() - w0
    finally:
        group.kill()
    own = meter.seconds()
    mean = mean_final_params(paths) if score is not None else None
    return ArmResult(name, records, wall, others_load(busy, own, load_wall), own,
                     mean_model_loss=math.nan if mean is None else score(mean))


def _why(run_dir: Path, dead: list) -> str:
    tails = [f"{log.name}: {log.read_text()[-600:]}" for log in sorted(run_dir.glob("*.log"))]
    return f"exit codes {dead or 'none (timed out)'}; " + " | ".join(tails)


def run_arms(arms: Sequence[tuple[str, Callable[[ProcessGroup, Path], int]]], prefix: str, budget_s: float,
             score: Callable[[torch.Tensor], float] | None = None) -> list[ArmResult]:
    """Each arm in turn; one that cannot start is reported failed, saying why, and the rest go on.
    `score`: see `run_arm`."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix=prefix))
    print(f"records and logs of every arm: {root}", file=sys.stderr, flush=True)
    results = []
    for i, (name, launch) in enumerate(arms):
        print(f"arm {name} ...", file=sys.stderr, flush=True)
        try:
            results.append(run_arm(name, launch, root / f"arm{i}", budget_s, score=score))
        except RuntimeError as exc:
            results.append(ArmResult(name, [], 0.0, float("nan"), 0.0, failed=str(exc)))
    return results


def arg_parser(doc: str | None) -> "argparse.ArgumentParser":
    """The flags every head-to-head script shares, and the hidden ones of its workers."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=int, default=4, help="processes per multi-process arm")
    ap.add_argument("--budget", type=float, default=60.0, help="wall-clock seconds of training per arm")
    ap.add_argument("--evals", type=int, default=8, help="held-out evaluations per process during the budget")
    ap.add_argument("--target", type=float, default=None, help="loss for 't to target' (default: the single process's final loss)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workload", choices=KINDS, default="mlp",
                    help="what every arm trains: the ~1M-parameter MLP, or the tiny TTS preset on the built-in corpus")
    ap.add_argument("--compression", default=None,
                    help="the gossip peers' codec (default: the peer's own; on a LAN, int8)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--workload-json", help=argparse.SUPPRESS)
    return ap


def single_arm_launcher(w: Workload, budget_s: float, evals: int) -> Callable[[ProcessGroup, Path], int]:
    def launch(group: ProcessGroup, run_dir: Path) -> int:
        group.spawn([sys.executable, __file__, "--worker", "--run-dir", str(run_dir), "--budget", str(budget_s),
                     "--evals", str(evals), "--workload-json", workload_json(w)], run_dir / "single.log")
        return 1
    return launch


if __name__ == "__main__":  # the single-process worker
    a = arg_parser(None).parse_args()
    plain_worker(load_workload(a.workload_json), a.run_dir, 0, a.budget, a.evals)
