"""One real gossip-tts peer (GossipPeer: driver, node worker, HTTP on 127.0.0.1, `--peer`
bootstrap, no mDNS) around a head-to-head workload (vs_workloads.py), or, with --alone, the same
trainer in the same training loop with no peer around it (the no-gossip control).

`gossip-tts peer` builds only the TTS trainer, whose data stream, schedule and checkpoints
no other arm has, so the benchmarks start this instead, every arm on one training step
(vs_common.train_step); the peer, its protocol and its defaults are the project's own, untouched.

Gossip CPU is measured per thread: the training thread (steps, and mixing at step
boundaries), the event-loop thread `gossip-net` (HTTP, session) and the node worker
`gossip-node_*` (compress, sign, verify, decode, apply; the peer's own
`worker_cpu_seconds_total` on /metrics, by job, is reported beside it).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

from vs_common import Clock, IterateAverage, ProcessGroup, Record, Workload, evaluate, train_step  # noqa: E402
from vs_workloads import load_workload, workload_json  # noqa: E402

from peer.trainer import Capabilities, StepStats, Trainer, add_flat_into, flatten, unflatten_into  # noqa: E402

LISTEN_RE = re.compile(r"listening on http://(\S+) ")


class ThreadCPU:
    """CPU seconds of each live thread, sampled until `stop()` (threads die before the end)."""

    def __init__(self, every_s: float = 0.5) -> None:
        self.seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        self.base = self._sample()
        self._thread.start()

    def _sample(self) -> dict[int, tuple[str, float]]:
        out = {}
        for t in threading.enumerate():
            if t.ident is None or t.name == "cpu-sampler":
                continue
            try:
                out[t.ident] = (t.name, time.clock_gettime(time.pthread_getcpuclockid(t.ident)))
            except (OSError, ProcessLookupError):
                pass
        return out

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.seen.update(self._sample())

    def stop(self) -> dict[str, float]:
        """Seconds per thread kind since `start()`: training, gossip-net, gossip-node, other."""
        self.seen.update(self._sample())
        self._stop.set()
        kinds: dict[str, float] = {}
        for ident, (name, cpu) in self.seen.items():
            kind = ("training" if name == "MainThread" else "gossip-node" if name.startswith("gossip-node")
                    else "gossip-net" if name == "gossip-net" else "other")
            kinds[kind] = kinds.get(kind, 0.0) + cpu - self.base.get(ident, (name, 0.0))[1]
        return kinds


class WorkloadTrainer(Trainer):
    """The workload behind the peer's Trainer seam; waits for the common start on its first step
    and sets `stop` once the budget is spent.

    Its averaged weights are the peer's own (`score_averaged_from`, the node's `average.weights()`) in
    the gossip arm, and its iterate average by the same rule (vs_common.IterateAverage) alone."""

    capabilities = Capabilities(add_in_place=True)
    """A mix adds its change to the parameters in place, as the TTS trainer's does."""

    def __init__(self, w: Workload, rank: int, clock: Clock, stop: threading.Event, evals_at_end: Callable[[], None],
                 slow_factor: float = 1.0) -> None:
        self.w, self.clock, self.stop, self.slow_factor = w, clock, stop, slow_factor
        self.task = w.task(rank)
        self.model = w.build_model()
        self.params = list(self.model.parameters())
        self.opt = w.optimizer()(self.params)
        self._base_lr = [group["lr"] for group in self.opt.param_groups]
        self.rec = Record(rank)
        self._started = False
        self._at_end = evals_at_end
        self.average = IterateAverage(self.model)
        self._averaged_source: Callable[[], torch.Tensor | None] | None = None

    def score_averaged_from(self, source: Callable[[], torch.Tensor | None]) -> None:
        """In the gossip arm: score the peer's own averaged weights, `source()` (None before its
        first publish), instead of this trainer's iterate average."""
        self._averaged_source = source

    def _evaluate(self) -> None:
        if self._averaged_source is not None:
            averaged = self._averaged_source()
            evaluate(self.rec, self.clock.elapsed(), self.task, self.model, self.average,
                     averaged if averaged is not None else self.get_flat_params())
        else:
            evaluate(self.rec, self.clock.elapsed(), self.task, self.model, self.average)

    @property
    def step_count(self) -> int:
        return self.rec.steps

    def step(self) -> Any:
        if not self._started:
            self._started = True
            self.clock.wait_for_go()
        if self.clock.eval_due():
            self._evaluate()
        loss = train_step(self.model, self.opt, self.task, self.rec, self.w, self.slow_factor)
        if self._averaged_source is None:
            self.average.observe(self.model, self.rec.steps)
        if self.clock.over():
            self._evaluate()
            self._at_end()
            self.stop.set()
        return StepStats(step=self.rec.steps, loss=loss, samples=self.w.batch_size)

    def param_spec(self) -> dict:
        return {name: (tuple(p.shape), "float32") for name, p in self.model.named_parameters()}

    def get_flat_params(self) -> torch.Tensor:
        return flatten(self.params)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        unflatten_into(flat, self.params)

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
        add_flat_into(delta, self.params, start)

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        raise NotImplementedError("the head-to-head's peers start together and never join (SessionConfig(join=False))")

    def set_step_scale(self, scale: float) -> None:
        """The swarm's step-size multiplier (the Trainer seam): on the workload's own learning rate."""
        for group, base in zip(self.opt.param_groups, self._base_lr):
            group["lr"] = base * scale

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {"flat": self.get_flat_params()}, {"step": self.rec.steps}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self.set_flat_params(tensors["flat"])

    def close(self) -> None:
        pass


def worker(a: argparse.Namespace) -> None:
    from peer.core.config import SessionConfig
    from peer.core.gossip_config import GossipConfig
    from peer.local.loop import LoopConfig, run_loop
    from peer.net.config import NetConfig
    from peer.runtime import GossipPeer
    from peer.startup import build_peer
    from protocol import Identity

    torch.set_num_threads(1)
    w = load_workload(a.workload_json)
    stop, cpu = threading.Event(), ThreadCPU()
    clock = Clock(a.run_dir, a.rank, a.budget, a.evals, on_go=cpu.start)
    end: dict[str, Any] = {}
    peer: GossipPeer | None = None

    def at_end() -> None:  # on the training thread, while the peer's threads still run
        end["threads"] = cpu.stop()
        if peer is not None:
            m = peer.metrics
            by_task = {labels.get("task", ""): v for name, labels, v in m.series() if name == "worker_cpu_seconds_total"}
            end["metrics"] = {"bytes_sent": m.total("bytes_sent_total"), "bytes_received": m.total("bytes_received_total"),
                              "exchanges": m.total("exchanges_total"), "mixes": m.total("mixes_total"),
                              "mix_s": sum(m.recent("boundary_seconds")), "neighbours": m.get("neighbours"),
                              "mixed_staleness_median": _median(m.recent("mixed_staleness_steps")),
                              "mixes_clipped": m.total("mix_clipped_total"),
                              "snapshots_sent": m.total("snapshots_sent_total"),
                              "worker_cpu_s": sum(by_task.values()), "worker_cpu_s_by_task": by_task,
                              "step_scale": m.get("step_scale") or 1.0}

    trainer = WorkloadTrainer(w, a.rank, clock, stop, at_end, a.slow_factor)
    loop_cfg = LoopConfig(log_every_s=1e9)
    if a.alone:
        run_loop(trainer, loop_cfg, stop=stop, emit=lambda s: None)
    else:
        peer = build_peer(trainer, loop_cfg, GossipConfig(swarm="bench-vs", **json.loads(a.gossip)),
                          NetConfig(listen="127.0.0.1:0", mdns=False, peers=a.peer), Identity.generate(),
                          emit=lambda s: print(s, flush=True), session_cfg=SessionConfig(join=False))

        def peer_average() -> torch.Tensor | None:  # read on the training thread: `weights` copies it out
            current = peer.node.average.weights() if peer is not None else None
            return None if current is None else current[0]

        trainer.score_averaged_from(peer_average)
        peer.run(stop)
    threads = end.get("threads", {})
    trainer.rec.extra = {**end.get("metrics", {}), "train_cpu_s": threads.get("training", 0.0),
                         "gossip_cpu_s": threads.get("gossip-net", 0.0) + threads.get("gossip-node", 0.0),
                         "threads_cpu_s": threads}
    trainer.rec.write(a.run_dir / f"rank{a.rank}.json", clock, trainer.get_flat_params())


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def gossip_arm_launcher(w: Workload, n: int, budget_s: float, evals: int, alone: bool = False,
                        slow_factor: float = 1.0, gossip: dict[str, Any] | None = None) -> Callable[[ProcessGroup, Path], int]:
    """Spawns N peers (rank 0 first; the others bootstrap from its address); the last peer is
    the straggler when `slow_factor` > 1. `gossip`: GossipConfig fields to change from the
    peer's defaults (none in the head-to-head arms: they measure the defaults)."""
    def launch(group: ProcessGroup, run_dir: Path) -> int:
        first = ""
        for rank in range(n):
            cmd = [sys.executable, __file__, "--run-dir", str(run_dir), "--rank", str(rank), "--budget", str(budget_s),
                   "--evals", str(evals), "--workload-json", workload_json(w),
                   "--slow-factor", str(slow_factor if rank == n - 1 else 1.0), "--gossip", json.dumps(gossip or {})]
            cmd += ["--alone"] if alone else (["--peer", first] if first else [])
            log = run_dir / f"peer{rank}.log"
            group.spawn(cmd, log)
            if rank == 0 and not alone:
                first = _wait_listening(log, group.procs[0])
        return n
    return launch


def _wait_listening(log: Path, proc: Any, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = LISTEN_RE.search(log.read_text())
        if m:
            return m.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"peer 0 exited ({proc.returncode}): {log.read_text()[-2000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"peer 0 did not listen within {timeout_s} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--budget", type=float, required=True)
    ap.add_argument("--evals", type=int, required=True)
    ap.add_argument("--workload-json", required=True)
    ap.add_argument("--slow-factor", type=float, default=1.0)
    ap.add_argument("--alone", action="store_true")
    ap.add_argument("--gossip", default="{}", help="GossipConfig fields to change, as JSON")
    ap.add_argument("--peer", action="append", default=[])
    worker(ap.parse_args())
