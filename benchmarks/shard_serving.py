"""Training throughput of a peer while it serves corpus shards, relative to the same peer not serving.

    python benchmarks/shard_serving.py [--clients 2] [--phases 10] [--steps-per-phase 8] [--max-upload-mb-s 0]

The measured peer (a real GossipPeer sharing a corpus: driver, node worker, HTTP server
with the shard routes) trains the small preset on CPU in this process and holds --shards shards of
--shard-mb MB of its own. --clients processes, each from its own loopback address (a
neighbour of its own, as the per-address upload cap sees it), download those shards from
it over 127.0.0.1 in a loop, as fast as the peer sends them. Training alternates between
phases in which the clients download and phases in which they wait, on the same trainer in
one run, so machine noise hits both arms alike. The clients stop by themselves: after
--client-seconds, when this process goes away, or when told to. Target: ratio >= 0.9.
The peer's own settings apply ([swarm_data] max_upload_mb_s, 25 MB/s); --max-upload-mb-s 0
measures it serving as fast as loopback goes. On one machine the clients' CPU (reading the
bytes) competes with training too, which a real neighbour's does not; it is printed. The
last line is `summary: {json}`.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
READ = 256 * 1024


# ---------------------------------------------------------------------------------------------- clients
def client_main(args: argparse.Namespace) -> None:
    """Download the shards over and over while `serve_flag` exists; stop at the deadline, when the
    parent dies, or when `stop_flag` exists. Prints the bytes received."""
    host, port = args.client.rsplit(":", 1)
    parent, deadline = os.getppid(), time.monotonic() + args.client_seconds
    serve_flag, stop_flag = Path(args.flag), Path(args.flag + ".stop")
    buf = bytearray(READ)
    got, i = 0, 0

    def running() -> bool:
        return time.monotonic() < deadline and os.getppid() == parent and not stop_flag.exists()

    while running():
        if not serve_flag.exists():
            time.sleep(0.05)
            continue
        digest = args.digest[i % len(args.digest)]
        i += 1
        conn = http.client.HTTPConnection(host, int(port), timeout=30, source_address=(args.source, 0))
        try:
            conn.request("GET", f"/v1/shards/{digest}")
            resp = conn.getresponse()
            if resp.status != 200:
                resp.read()
                time.sleep(0.2)  # refused (a limit): ask again shortly, as a fetcher would ask elsewhere
                continue
            while serve_flag.exists() and running() and (n := resp.readinto(buf)):
                got += n
        except OSError:
            time.sleep(0.2)
        finally:
            conn.close()
    print(f"client {args.source} received {got}", flush=True)


def spawn_clients(args: argparse.Namespace, address: str, digests: list[str], flag: Path) -> list[subprocess.Popen]:
    procs = []
    for i in range(args.clients):
        cmd = [sys.executable, __file__, "--client", address, "--source", f"127.0.0.{10 + i}", "--flag", str(flag),
               "--client-seconds", str(args.client_seconds)]
        for d in digests:
            cmd += ["--digest", d]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    return procs


# ---------------------------------------------------------------------------------------------- the peer
def make_shards(folder: Path, n: int, mb: int) -> list[Path]:
    paths = []
    for i in range(n):
        path = folder / f"bench-{i:03d}.tar"
        with open(path, "wb") as f:
            for _ in range(mb):
                f.write(os.urandom(1 << 20))
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--clients", type=int, default=2, help="downloading processes, each from its own loopback address")
    ap.add_argument("--phases", type=int, default=10, help="alternating phases after the first (even: equal counts)")
    ap.add_argument("--steps-per-phase", type=int, default=8)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--shard-mb", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-frames", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-upload-mb-s", type=float, default=None,
                    help="the peer's upload cap ([swarm_data] max_upload_mb_s; default: the peer's default)")
    ap.add_argument("--client-seconds", type=float, default=1800.0, help="a client stops by itself after this long")
    ap.add_argument("--client", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--source", default="127.0.0.1", help=argparse.SUPPRESS)
    ap.add_argument("--flag", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--digest", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client is not None:
        return client_main(args)
    with tempfile.TemporaryDirectory(prefix="shard-serving-") as tmp:
        run_benchmark(args, Path(tmp))


def run_benchmark(args: argparse.Namespace, tmp: Path) -> None:
    sys.path.insert(0, str(HERE))
    from machine import describe

    from gossip_tts.data import ensure_builtin_corpus
    from gossip_tts.apps.swarm_data import SwarmData
    from gossip_tts.train.config import TrainConfig
    from gossip_tts.train.trainer import TTSTrainer
    from peer.core.config import SessionConfig
    from peer.core.gossip_config import GossipConfig
    from peer.local.loop import LoopConfig
    from peer.net.config import NetConfig
    from peer.runtime import GossipPeer, PeerParts
    from peer.shards.config import SwarmDataConfig
    from peer.startup import build_parts
    from peer.shards.manifest import Manifest, ShardEntry
    from protocol import Identity

    class PhasedServingPeer(GossipPeer):
        """Lets the clients download in every other phase of `steps_per_phase` steps, and times each phase."""

        def __init__(self, parts: PeerParts, steps_per_phase: int, flag: Path) -> None:
            super().__init__(parts)
            self.steps_per_phase, self.flag = steps_per_phase, flag
            self.phase_times: dict[bool, list[float]] = {True: [], False: []}
            self.phase_cpu: dict[bool, list[float]] = {True: [], False: []}
            self.phase_bytes: dict[bool, list[float]] = {True: [], False: []}
            self.phase_other_cpu: dict[bool, list[float]] = {True: [], False: []}
            self._t0, self._c0, self._b0, self._p0 = time.perf_counter(), time.thread_time(), 0.0, time.process_time()

        def make_hook(self):
            gossip_hook = super().make_hook()

            def hook(trainer, stats) -> None:
                gossip_hook(trainer, stats)
                phase = (stats.step - 1) // self.steps_per_phase
                serving = phase % 2 == 1  # phase 0 (warm-up) does not serve; then alternate
                if stats.step % self.steps_per_phase:
                    return
                now, cpu, sent = time.perf_counter(), time.thread_time(), self.metrics.total("data_bytes_sent_total")
                process = time.process_time()
                self.phase_times[serving].append(now - self._t0)
                self.phase_cpu[serving].append(cpu - self._c0)
                self.phase_bytes[serving].append(sent - self._b0)
                self.phase_other_cpu[serving].append((process - self._p0) - (cpu - self._c0))
                self._t0, self._c0, self._b0, self._p0 = now, cpu, sent, process
                if (phase + 1) % 2 == 1:  # the next phase serves
                    self.flag.touch()
                else:
                    self.flag.unlink(missing_ok=True)
                print(f"\rphase {phase + 1} ({'serving' if serving else 'quiet'})", end="", file=sys.stderr)

            return hook

    print(describe())
    own = tmp / "own"
    own.mkdir()
    paths = make_shards(own, args.shards, args.shard_mb)
    manifest = Manifest(tuple(ShardEntry(p.name, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest(), "mel",
                                         4, 10.0, 1, 1.0) for p in paths))
    flag = tmp / "serve"
    identity = Identity.generate()
    sd_cfg = SwarmDataConfig() if args.max_upload_mb_s is None else SwarmDataConfig(max_upload_mb_s=args.max_upload_mb_s)
    swarm = SwarmData(manifest, own, sd_cfg, tmp / "cache", identity, [])
    sources = [str(ensure_builtin_corpus()[0])]
    trainer = TTSTrainer(TrainConfig(preset=args.preset, device="cpu", sources=sources, batch_size=args.batch_size,
                                     max_frames=args.max_frames, seed=0, threads=args.threads))
    clients: list[subprocess.Popen] = []

    def emit(line: str) -> None:
        if line.startswith("listening on http://"):  # the server is up: start the clients (they wait for the flag)
            address = line.split()[2].removeprefix("http://")
            clients.extend(spawn_clients(args, address, [s.sha256 for s in manifest.shards], flag))

    total = args.steps_per_phase * (args.phases + 1)
    parts = build_parts(trainer, LoopConfig(max_steps=total, log_every_s=1e9), GossipConfig(swarm="bench"),
                        NetConfig(listen="127.0.0.1:0", mdns=False), identity, emit=emit, metrics=swarm.metrics,
                        corpus=swarm, session_cfg=SessionConfig(join=False))
    peer = PhasedServingPeer(parts, steps_per_phase=args.steps_per_phase, flag=flag)
    received = 0
    try:
        peer.run()
    finally:
        flag.unlink(missing_ok=True)
        Path(str(flag) + ".stop").touch()
        for p in clients:
            out, _ = p.communicate(timeout=60)
            received += sum(int(line.split()[-1]) for line in out.splitlines() if " received " in line)
        trainer.close()
        swarm.close()
    print(file=sys.stderr)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report(args, peer, received, sd_cfg, usage.ru_utime + usage.ru_stime)


def report(args: argparse.Namespace, peer, received: int, sd_cfg, clients_cpu: float) -> None:
    quiet = peer.phase_times[False][1:]  # the first quiet phase is warm-up
    serving = peer.phase_times[True]
    n = min(len(quiet), len(serving))
    quiet, serving = quiet[:n], serving[:n]
    cpu_quiet, cpu_serving = peer.phase_cpu[False][1:n + 1], peer.phase_cpu[True][:n]
    sent = peer.phase_bytes[True][:n]
    ratio = sum(quiet) / sum(serving)
    cpu_ratio = sum(cpu_quiet) / sum(cpu_serving)
    rate = sum(sent) / sum(serving) / 1e6
    print(f"preset {args.preset}, batch {args.batch_size}, {args.clients} clients, {args.shards} shards of "
          f"{args.shard_mb} MB, {n} phases of {args.steps_per_phase} steps per arm")
    print(f"quiet   s/phase: {' '.join(f'{t:.2f}' for t in quiet)}")
    print(f"serving s/phase: {' '.join(f'{t:.2f}' for t in serving)}")
    print(f"bytes served per serving phase (MB): {' '.join(f'{b / 1e6:.0f}' for b in sent)}; "
          f"{rate:.1f} MB/s while serving; the clients received {received / 1e6:.0f} MB in all")
    print(f"training-thread CPU s/phase: quiet {' '.join(f'{t:.2f}' for t in cpu_quiet)}; "
          f"serving {' '.join(f'{t:.2f}' for t in cpu_serving)}")
    other_quiet, other_serving = peer.phase_other_cpu[False][1:n + 1], peer.phase_other_cpu[True][:n]
    print(f"other threads of this process (torch workers, server, gossip, data reader) CPU s/phase: quiet "
          f"{' '.join(f'{t:.2f}' for t in other_quiet)}; serving {' '.join(f'{t:.2f}' for t in other_serving)}; "
          f"the clients used {clients_cpu:.1f} CPU s in all")
    print(f"throughput serving / quiet, wall clock: {ratio:.3f} (target >= 0.9)")
    print(f"training-thread CPU time quiet / serving: {cpu_ratio:.3f}")
    print("summary: " + json.dumps({"ratio": round(ratio, 4), "cpu_ratio": round(cpu_ratio, 4),
                                    "served_mb_per_s": round(rate, 2), "clients": args.clients,
                                    "max_upload_mb_s": sd_cfg.max_upload_mb_s, "clients_cpu_s": round(clients_cpu, 1),
                                    "preset": args.preset, "phases_per_arm": n,
                                    "load_after": round(os.getloadavg()[0], 1)}, sort_keys=True))


if __name__ == "__main__":
    main()
