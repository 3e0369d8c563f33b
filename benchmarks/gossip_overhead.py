"""Training throughput of one peer with gossip on, relative to the same trainer with it off.

    python benchmarks/gossip_overhead.py [--preset small] [--phases 12] [--steps-per-phase 8] [--threads 1]
                                         [--device cuda] [--device-budget-gib 16]

The measured peer trains in this process and talks to two neighbour processes over real
HTTP on 127.0.0.1. Its training alternates between phases with gossip (mix, publish every
--gossip-every steps, exchange) and phases without, on the same trainer in one run, so
machine noise hits both arms alike. Every phase trains on the same `--steps-per-phase`
batches, drawn once and replayed (`ReplayTrainer`): the corpus's clips differ in length, so
with fresh batches a phase's cost also depends on which clips it drew, and the first gossip
phase would always draw the same ones (docs/benchmarks/peer.md#throughput-with-gossip-on-and-off). The
neighbours run the same model but do not train
(each takes a step every few seconds, so they still publish and answer exchanges): on
this 2-core machine two training neighbours would measure CPU contention, not gossip.
For the same reason the measured peer trains on one torch thread by default (`--threads`):
the neighbours' own signing and decoding, which on a real swarm runs on other machines,
then lands on the second core instead of stalling a two-thread step, whose threads spin at
every barrier while one of them waits for a core.
On a GPU (`--device cuda`) the measured peer trains there, and `--device-budget-gib` lets its node
hold its copies on the GPU too (`GossipConfig.device_budget_gib`, peer/core/placement.py): run it
with 0 and with a budget to compare the node's arithmetic on the CPU and on the GPU.
Target: ratio >= 0.97.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402

from gossip_tts.data import ensure_builtin_corpus  # noqa: E402
from gossip_tts.train.config import TrainConfig  # noqa: E402
from gossip_tts.train.trainer import TTSTrainer  # noqa: E402
from peer.core.config import SessionConfig  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.local.loop import LoopConfig  # noqa: E402
from peer.net.config import NetConfig  # noqa: E402
from peer.runtime import GossipPeer, PeerParts  # noqa: E402
from peer.startup import build_parts, build_peer  # noqa: E402
from peer.trainer import WrappedTrainer  # noqa: E402
from protocol import Identity  # noqa: E402


class ReplayTrainer(TTSTrainer):
    """Trains on the same `n` batches over and over, so every phase does the same work."""

    def __init__(self, cfg: TrainConfig, n: int) -> None:
        super().__init__(cfg)
        self._pool = [super(ReplayTrainer, self).next_batch() for _ in range(n)]
        self._turn = itertools.cycle(self._pool)

    def next_batch(self):
        return next(self._turn)


class IdleTrainer(WrappedTrainer):
    """A neighbour that holds the model and gossips, but barely trains (one step per `period` s)."""

    def __init__(self, inner: TTSTrainer, period: float) -> None:
        super().__init__(inner)
        self.period = period

    def step(self):
        time.sleep(self.period)
        return self.inner.step()


class PhasedPeer(GossipPeer):
    """Switches gossip on and off every `steps_per_phase` steps and times each phase."""

    def __init__(self, parts: PeerParts, steps_per_phase: int) -> None:
        super().__init__(parts)
        self.steps_per_phase = steps_per_phase
        self.phase_times: dict[bool, list[float]] = {True: [], False: []}
        self.phase_cpu: dict[bool, list[float]] = {True: [], False: []}
        self._t0 = time.perf_counter()
        self._c0 = time.thread_time()

    def make_hook(self):
        gossip_hook = super().make_hook()

        def hook(trainer, stats) -> None:
            phase = (stats.step - 1) // self.steps_per_phase
            gossip_on = phase % 2 == 1  # phase 0 (warm-up-ish) is solo; then alternate
            if gossip_on:
                gossip_hook(trainer, stats)
            if stats.step % self.steps_per_phase == 0:
                now, cpu = time.perf_counter(), time.thread_time()
                self.phase_times[gossip_on].append(now - self._t0)
                self.phase_cpu[gossip_on].append(cpu - self._c0)
                self._t0, self._c0 = now, cpu
                print(f"\rphase {phase + 1} ({'gossip' if gossip_on else 'solo'})", end="", file=sys.stderr)

        return hook


def trainer_cfg(args, sources, seed: int, device: str = "cpu") -> TrainConfig:
    return TrainConfig(preset=args.preset, device=device, sources=sources, batch_size=args.batch_size,
                       max_frames=args.max_frames, seed=seed, threads=args.threads)


def neighbour_main(args) -> None:
    sources = [str(ensure_builtin_corpus()[0])]
    trainer = IdleTrainer(TTSTrainer(trainer_cfg(args, sources, seed=args.neighbour)), period=args.neighbour_period)
    peer = build_peer(trainer, LoopConfig(log_every_s=1e9), GossipConfig(swarm="bench", gossip_every=1, compression=args.compression),
                      NetConfig(listen="127.0.0.1:0", mdns=False, peers=args.peer), Identity.generate(),
                      emit=lambda s: print(s, flush=True), session_cfg=SessionConfig(join=False))
    peer.run()


def spawn_neighbour(args, i: int, peers: list[str]) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, __file__, "--neighbour", str(i), "--preset", args.preset, "--compression", args.compression,
           "--threads", "1", "--batch-size", str(args.batch_size), "--max-frames", str(args.max_frames)]
    for p in peers:
        cmd += ["--peer", p]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("listening on http://"):
            return proc, line.split()[2].removeprefix("http://")
    raise RuntimeError("neighbour did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--phases", type=int, default=12, help="alternating phases after the first (even: equal counts); 12: 6 per arm, so first contacts are paid once among several phases, as in a real run")
    ap.add_argument("--steps-per-phase", type=int, default=8)
    ap.add_argument("--gossip-every", type=int, default=4)
    ap.add_argument("--compression", default="topk:0.1+int8")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-frames", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the measured trainer")
    ap.add_argument("--device", default="cpu", help="where the measured peer trains (its neighbours: the CPU)")
    ap.add_argument("--device-budget-gib", type=float, default=0.0,
                    help="GossipConfig.device_budget_gib of the measured peer (0: its node on the CPU)")
    ap.add_argument("--neighbour", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--neighbour-period", type=float, default=3.0, help=argparse.SUPPRESS)
    ap.add_argument("--peer", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.neighbour is not None:
        return neighbour_main(args)
    print(describe())
    sources = [str(ensure_builtin_corpus()[0])]
    procs = []
    try:
        p1, a1 = spawn_neighbour(args, 1, [])
        p2, a2 = spawn_neighbour(args, 2, [a1])
        procs = [p1, p2]
        trainer = ReplayTrainer(trainer_cfg(args, sources, seed=0, device=args.device), args.steps_per_phase)
        total = args.steps_per_phase * (args.phases + 1)
        peer = PhasedPeer(build_parts(trainer, LoopConfig(max_steps=total, log_every_s=1e9),
                                      GossipConfig(swarm="bench", gossip_every=args.gossip_every, compression=args.compression,
                                                   device_budget_gib=args.device_budget_gib),
                                      NetConfig(listen="127.0.0.1:0", mdns=False, peers=[a1, a2]), Identity.generate(),
                                      emit=lambda s: None, session_cfg=SessionConfig(join=False)),
                          steps_per_phase=args.steps_per_phase)
        peer.run()
        trainer.close()
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
    print(file=sys.stderr)
    solo = peer.phase_times[False][1:]  # drop the first solo phase: warm-up
    gossip = peer.phase_times[True]
    n = min(len(solo), len(gossip))
    solo, gossip = solo[:n], gossip[:n]
    ratio = sum(solo) / sum(gossip)
    cpu_solo, cpu_gossip = peer.phase_cpu[False][1 : n + 1], peer.phase_cpu[True][:n]
    cpu_ratio = sum(cpu_solo) / sum(cpu_gossip)
    m = peer.metrics
    print(f"preset {args.preset}, batch {args.batch_size}, gossip every {args.gossip_every} steps, {args.compression}, "
          f"2 neighbours, {n} phases of {args.steps_per_phase} steps per arm")
    print(f"solo   s/phase: {' '.join(f'{t:.2f}' for t in solo)}")
    print(f"gossip s/phase: {' '.join(f'{t:.2f}' for t in gossip)}")
    print(f"exchanges {m.total('exchanges_ok_total'):.0f}, bytes sent {m.total('bytes_sent_total') / 1e6:.1f} MB, "
          f"received {m.total('bytes_received_total') / 1e6:.1f} MB, mixes {m.total('mixes_total'):.0f}")
    print(f"training-thread CPU s/phase: solo {' '.join(f'{t:.2f}' for t in cpu_solo)}; "
          f"gossip {' '.join(f'{t:.2f}' for t in cpu_gossip)}")
    print(f"throughput with gossip / without, wall clock: {ratio:.3f} (target >= 0.97)")
    print(f"training-thread CPU time without / with gossip: {cpu_ratio:.3f} "
          "(what gossip costs the training thread itself; immune to other processes' load)")
    print("summary: " + json.dumps({"ratio": round(ratio, 4), "cpu_ratio": round(cpu_ratio, 4),
                                    "exchanges": m.total("exchanges_ok_total"), "node_device": str(peer.node.device),
                                    "preset": args.preset, "phases_per_arm": n}, sort_keys=True))


if __name__ == "__main__":
    main()
