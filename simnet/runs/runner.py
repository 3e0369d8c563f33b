"""Run every run of a scenario, sample its metrics on a virtual-time grid, write the results.

Runs go one after another in one process. Each is advanced in slices of `eval_every_s`
virtual seconds; after each slice one metrics row is taken, time-to-target is checked and
a progress line goes to stderr every few real seconds. Ctrl+C ends the current run at
once and skips the rest; everything sampled so far is still written and summarised.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from peer.torch_threads import one_torch_thread
from simnet.runs.baselines import SyncSim
from simnet.runs.config import SimConfig, WorldConfig
from simnet.runs.low_comm import NoLoCoSim, SparseLoCoSim
from simnet.runs.swarm import GossipSim


class Sim(Protocol):
    peer_steps: int

    def advance_to(self, t: float) -> None: ...

    def sample(self) -> dict: ...

    def staleness(self) -> list[float]: ...

    def totals(self) -> dict: ...

    def finished(self) -> bool: ...

    def close(self) -> None: ...


@dataclass
class RunRecord:
    name: str
    method: str
    world: WorldConfig
    rows: list[dict] = field(default_factory=list)
    time_to_target_s: float | None = None
    staleness: list[float] = field(default_factory=list)
    totals: dict = field(default_factory=dict)
    peer_steps: int = 0
    sim_time_s: float = 0.0
    cpu_sim_s: float = 0.0
    """Process CPU seconds spent advancing the simulation (not sampling metrics)."""
    cpu_measured_s: float = 0.0
    """Of `cpu_sim_s`, the part after `world.cost_warmup_s`."""
    peer_steps_measured: int = 0
    """Peer-steps taken after `world.cost_warmup_s`."""
    cpu_total_s: float = 0.0
    real_s: float = 0.0
    interrupted: bool = False
    cut_short: bool = False


def make_sim(world: WorldConfig, seed: int, method: str) -> Sim:
    if method == "gossip":
        return GossipSim(world, seed)
    if method == "sparseloco":
        return SparseLoCoSim(world, seed)
    if method == "noloco":
        return NoLoCoSim(world, seed)
    return SyncSim(world, seed, method)


def run_one(cfg: SimConfig, name: str, method: str, emit: Callable[[str], None]) -> RunRecord:
    world = cfg.worlds[name]
    rec = RunRecord(name, method, world)
    real0, cpu0 = time.perf_counter(), time.process_time()
    last_progress = real0
    sim: Sim | None = None
    try:
        sim = make_sim(world, cfg.seed, method)
        rec.rows.append({**sim.sample(), "t": 0.0, "run": name})
        stop_t, k, t, t_prev = world.duration_s, 0, 0.0, 0.0
        while t < stop_t:
            k += 1
            t = min(k * world.eval_every_s, stop_t)
            c, steps_before, t_before = time.process_time(), sim.peer_steps, t_prev
            sim.advance_to(t)
            spent = time.process_time() - c
            rec.cpu_sim_s += spent
            if t_before >= world.cost_warmup_s:
                rec.cpu_measured_s += spent
                rec.peer_steps_measured += sim.peer_steps - steps_before
            t_prev = t
            row = {**sim.sample(), "t": t, "run": name}
            rec.rows.append(row)
            rec.sim_time_s, rec.peer_steps = t, sim.peer_steps
            loss, target = row["loss"], world.target_loss
            if rec.time_to_target_s is None and target is not None and loss is not None and loss <= target:
                rec.time_to_target_s = t
                if world.stop_at_target:
                    tail = math.ceil(t * (1 + world.tail_fraction) / world.eval_every_s - 1e-9) * world.eval_every_s
                    stop_t = min(stop_t, max(t, tail))
            now = time.perf_counter()
            if now - last_progress >= cfg.progress_every_s:
                last_progress = now
                emit(progress_line(cfg.name, name, row, stop_t, now - real0))
            if sim.finished():
                break
            if cfg.max_real_s is not None and now - real0 > cfg.max_real_s:
                rec.cut_short = True
                emit(f"simnet {cfg.name}: {name} cut short after {now - real0:.0f} s real (max_real_s)")
                break
        rec.staleness, rec.totals = sim.staleness(), sim.totals()
    except KeyboardInterrupt:
        rec.interrupted = True
        emit(f"simnet {cfg.name}: interrupted during {name}; keeping what was sampled")
        if sim is not None:
            rec.staleness, rec.totals = sim.staleness(), sim.totals()
    finally:
        if sim is not None:
            sim.close()
    rec.real_s = time.perf_counter() - real0
    rec.cpu_total_s = time.process_time() - cpu0
    return rec


def progress_line(scenario: str, run: str, row: dict, stop_t: float, real_s: float) -> str:
    loss = row["loss"]
    loss_text = "-" if loss is None else f"{loss:.4g}"
    return (f"simnet {scenario}: {run:<12} t={row['t']:7.1f}/{stop_t:.0f} s sim  loss {loss_text}  "
            f"peer-steps {row['peer_steps']}  online {row['online']}  {real_s:5.1f} s real")


def run_records(cfg: SimConfig, emit: Callable[[str], None]) -> tuple[list[RunRecord], bool]:
    """Every run of the scenario, in order; stops early (keeping results) on Ctrl+C."""
    records: list[RunRecord] = []
    with one_torch_thread():  # deterministic reductions, and fair to a shared machine
        try:
            for run in cfg.runs:
                emit(f"simnet {cfg.name}: {run.name} ({run.method}, {cfg.worlds[run.name].n_peers} peers)")
                rec = run_one(cfg, run.name, run.method, emit)
                records.append(rec)
                if rec.interrupted:
                    return records, True
        except KeyboardInterrupt:
            return records, True
    return records, False


def stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
