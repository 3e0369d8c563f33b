"""How long the training thread spends at a step boundary while the node worker is busy.

    python benchmarks/step_boundary.py [--sizes 6030000,25000000] [--boundaries 60]

For each model size, a peer's node worker (the real `NodeWorker` thread) ingests a
neighbour's signed, compressed updates back to back (verify, decode, apply, sign the
reply) and publishes our own, as it would with a neighbour exchanging continuously; the
neighbour's bodies are prepared beforehand, as another machine would make them.
Meanwhile the training thread runs the real `BoundaryHook` after every (simulated) step:
it mixes from the newest view and hands over a publish copy every `--gossip-every` steps. Printed side by side, from one run: the hook's
time per boundary that mixed, and the time of the mixing arithmetic alone
(`async_opt.mix_step` on the same inputs), at p50 and p99, and their ratio. A hook that waited
for the worker's compression, signing or decoding would show that wait in the ratio.
Target: p99 ratio <= 1.2.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402

from async_opt import mix_step  # noqa: E402
from peer.boundary import BoundaryHook  # noqa: E402
from peer.core.cadence import PublishCadence  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.mixer import Mixer  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from peer.metrics import Metrics  # noqa: E402
from peer.net.node_worker import NodeWorker  # noqa: E402
from peer.trainer import Capabilities, ParamSpec, StepStats, Trainer, add_flat_into, flatten, unflatten_into  # noqa: E402
from protocol import Identity  # noqa: E402


class FlatTrainer(Trainer):
    """Parameters in ~50 tensors like a real model; a step is a fixed amount of sleep."""

    capabilities = Capabilities(add_in_place=True)

    def __init__(self, numel: int, step_s: float) -> None:
        sizes = [numel // 50] * 49 + [numel - 49 * (numel // 50)]
        self.params = [torch.randn(n) * 0.02 for n in sizes]
        self._steps, self.step_s = 0, step_s

    @property
    def step_count(self) -> int:
        return self._steps

    def step(self) -> StepStats:
        time.sleep(self.step_s)  # the GPU (or other cores) doing the work; this thread idles
        self._steps += 1
        for p in self.params:
            p.add_(1e-4)
        return StepStats(self._steps, 1.0, 1)

    def param_spec(self) -> ParamSpec:
        return {f"p{i}": ((p.numel(),), "float32") for i, p in enumerate(self.params)}

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict]:
        return {"flat": self.get_flat_params()}, {"step": self._steps}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict) -> None:
        self.set_flat_params(tensors["flat"])
        self._steps = int(meta["step"])

    def close(self) -> None:
        pass

    def get_flat_params(self) -> torch.Tensor:
        return flatten(self.params)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        unflatten_into(flat, self.params)

    def set_step_scale(self, scale: float) -> None:
        """The swarm's step-size multiplier: its fixed steps ignore it (only the boundary's cost is timed)."""

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        self.set_flat_params(flat)
        self.step_count = int(step)

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:  # as TTSTrainer: in place, tensor by tensor
        add_flat_into(delta, self.params, start)


def measure(numel: int, boundaries: int, gossip_every: int, step_s: float, compression: str, prepared: int) -> dict:
    # The neighbour pushes its updates (its side is prepared in advance), and a pushed copy is
    # mixed only with pull-only mixing off; the boundary's cost per mixed copy is the same.
    cfg = GossipConfig(swarm="bench", gossip_every=gossip_every, compression=compression, pull_only=False)
    tr = FlatTrainer(numel, step_s)
    x0 = tr.get_flat_params()
    spec = {"w": ((numel,), "float32")}
    me = GossipNode(cfg, Identity.generate(b"\x01" * 32), spec, x0, now=time.time(), view_gate=threading.Lock())
    them = GossipNode(cfg, Identity.generate(b"\x02" * 32), spec, x0, now=time.time())
    worker = NodeWorker(me, time.time)
    # The neighbour's side is prepared beforehand (on a real network it runs on another
    # machine): a chain of exchange bodies, each carrying one fresh compressed update.
    bodies = []
    x = x0.clone()
    reply, _ = me.handle_request(them.build_request(None, time.time()), time.time())
    them.handle_response(reply, time.time())  # a first contact: they hold a ticket of ours
    me.handle_request(them.build_request(me.identity.public_key, time.time()), time.time())  # the pair starts with a snapshot
    them_view = them.neighbours[me.identity.public_key]
    for k in range(1, prepared + 1):
        x += torch.randn(numel) * 1e-3
        them.publish(x, k, time.time())
        them_view.acked_epoch, them_view.acked_seq = them.epoch, k - 1
        them.held_tickets.keep(me.identity.public_key, me.epoch, me.tickets.issue(them.identity.public_key))  # as our answer brings
        bodies.append(them.build_request(me.identity.public_key, time.time()))
        print(f"\r{numel / 1e6:.1f}M: prepared {k}/{prepared} neighbour updates", end="", file=sys.stderr)
    stop = threading.Event()
    ingested = [0]

    def neighbour() -> None:  # exchanges back to back: the worker is never idle for long
        for body in bodies:
            if stop.is_set():
                break
            worker._executor.submit(me.handle_request, body, time.time()).result()
            ingested[0] += 1
        stop.set()

    net = threading.Thread(target=neighbour, daemon=True)
    net.start()
    publishes = [0]

    def notify(step: int, due: bool) -> None:
        if due and worker.pending.needs_job():  # as the driver: publishes coalesce
            worker._executor.submit(worker.publish_pending)
            publishes[0] += 1

    hook = BoundaryHook(Mixer(cfg), me.view_slot, worker.pending, notify, Metrics(), PublishCadence(gossip_every, 0.0),
                        time.time)
    hook_s, mix_s = [], []
    try:
        while len(hook_s) < boundaries and not stop.is_set():
            stats = tr.step()
            view = me.view_slot.current
            x_before = tr.get_flat_params()
            t0 = time.perf_counter()
            hook(tr, stats)
            dt = time.perf_counter() - t0
            if hook.last_mixed:
                hook_s.append(dt)
                pairs = [(c.x_hat, 0.5) for c in view.copies]
                t1 = time.perf_counter()
                mix_step(x_before, view.public, pairs, 1.0)
                mix_s.append(time.perf_counter() - t1)
            print(f"\r{numel / 1e6:.1f}M: {len(hook_s)}/{boundaries} boundaries with a mix", end="", file=sys.stderr)
    finally:
        stop.set()
        net.join(30)
        worker.close()
    print(file=sys.stderr)
    if not hook_s:
        raise SystemExit(f"{numel:,} parameters: no boundary mixed before the neighbour's {prepared} updates "
                         "ran out; raise --prepared or --step-seconds")

    def q(xs: list[float], p: float) -> float:
        s = sorted(xs)
        return s[min(len(s) - 1, int(p * len(s)))]

    out = {"numel": numel, "boundaries": len(hook_s), "ingested": ingested[0], "publishes": publishes[0],
           "hook_p50_ms": q(hook_s, 0.5) * 1e3, "hook_p99_ms": q(hook_s, 0.99) * 1e3,
           "mix_p50_ms": q(mix_s, 0.5) * 1e3, "mix_p99_ms": q(mix_s, 0.99) * 1e3}
    out["ratio_p50"] = out["hook_p50_ms"] / out["mix_p50_ms"]
    out["ratio_p99"] = out["hook_p99_ms"] / out["mix_p99_ms"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="6030000,25000000", help="parameter counts (6.03M is the small preset)")
    ap.add_argument("--boundaries", type=int, default=60, help="boundaries with a mix to time, per size")
    ap.add_argument("--gossip-every", type=int, default=4)
    ap.add_argument("--step-seconds", type=float, default=0.05)
    ap.add_argument("--prepared", type=int, default=40, help="neighbour updates prepared (and ingested) per size")
    ap.add_argument("--compression", default="topk:0.1+int8")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(describe())
    rows = [measure(int(n), args.boundaries, args.gossip_every, args.step_seconds, args.compression, args.prepared)
            for n in args.sizes.split(",")]
    print(f"{'params':>10} {'mixes':>6} {'hook p50 ms':>12} {'hook p99 ms':>12} {'mix p50 ms':>11} "
          f"{'mix p99 ms':>11} {'p50 ratio':>10} {'p99 ratio':>10} {'ingested':>9}")
    for r in rows:
        print(f"{r['numel']:>10} {r['boundaries']:>6} {r['hook_p50_ms']:>12.2f} {r['hook_p99_ms']:>12.2f} "
              f"{r['mix_p50_ms']:>11.2f} {r['mix_p99_ms']:>11.2f} {r['ratio_p50']:>10.2f} {r['ratio_p99']:>10.2f} "
              f"{r['ingested']:>9}")
    print("target: p99 ratio <= 1.2 (hook time / mixing arithmetic alone)")
    print("ratio: " + json.dumps({str(r["numel"]): round(r["ratio_p99"], 3) for r in rows}, sort_keys=True))


if __name__ == "__main__":
    main()
