"""The CPU one whole publish period costs a peer, stage by stage, against one training step.

    python benchmarks/publish_cycle.py [--sizes 1132560,30000000] [--periods 8] [--held 2] [--start-step 1000] [--json OUT]

A peer at the defaults (a publish every step, two pulls per publish, top-10% + int8) spends,
per publish period: on its training thread, the step boundary (`BoundaryHook`: the mix of the
copies its last pulls brought, a parameter copy handed over for the publish); on its node
worker, the publish (x − x̂, the codec, the frame's lz4 and signature, x̂ + q, the averaged
weights), two exchanges it starts (build the request, ingest the answer: verify, decode,
apply) and, in a swarm where every peer pulls two others, two requests it answers. This
runs that period on real `GossipNode`s (ours and two partners that publish and answer as
ours does; with --held N, N − 2 more neighbours whose copies we hold without pulling them, as
a peer in a larger swarm does: the averaged weights read every held copy when they sample) with
one torch thread, and times our node's and our training thread's share in
thread CPU seconds, each stage separately; the partners' work is not counted. Sub-stages
are timed by wrapping the functions the node calls (each line is inclusive of the lines
indented under it). The last lines give the period's total against one training step of the
head-to-head MLP (vs_workloads.MLPWorkload, batch 1024, one thread), measured in the same run.

Every figure is a mean over the periods, so a stage that runs in some periods only (the averaged
weights sample every few steps once a peer is past its first few hundred: `PowerEma.due`) counts
its share. The peers start at step --start-step (`START_STEP`, past that point).

The trainer holds its parameters as separate tensors and mixes through a full parameter copy
(no `add_to_flat_params`), as a trainer without `Capabilities.add_in_place` does; with
--add-in-place it adds the mix to them in place, as the TTS trainer and the head-to-head's
(vs_gossip_peer.py) do. At 1132560 parameters the tensors are the MLP's own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # this checkout's code
import torch  # noqa: E402
from machine import describe  # noqa: E402
from proc_memory import reset_peak, status_bytes  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

from async_opt.mix_change import MixChange  # noqa: E402
import peer.core.ingest as ingest_module  # noqa: E402
import peer.core.node as node_module  # noqa: E402
import protocol.messages as messages_module  # noqa: E402
from peer.boundary import BoundaryHook, PendingPublish  # noqa: E402
from peer.core.gossip_config import GossipConfig  # noqa: E402
from peer.core.mixer import Mixer  # noqa: E402
from peer.core.node import GossipNode  # noqa: E402
from peer.metrics import Metrics  # noqa: E402
from peer.net.node_worker import NodeWorker  # noqa: E402
from peer.trainer import Capabilities, ParamSpec, StepStats, Trainer, add_flat_into, flatten, flatten_bf16, unflatten_into  # noqa: E402
from protocol import CodecBase, Identity, SparseCodec, VerifiedFrame  # noqa: E402

NOW = 1.7e9
START_STEP = 1000
"""The step the peers start at: past the first few hundred, where the averaged weights sample one
publish in four (`PowerEma.due`), as they do for most of a run."""
PERIOD_S = 0.1
STAGES = (
    ("boundary", "training"), ("  mix", "training"), ("  get_flat_params", "training"),
    ("  set_flat_params", "training"), ("  add_to_flat_params", "training"),
    ("publish", "worker"), ("  update frame", "worker"), ("    codec", "worker"), ("    lz4 + sign", "worker"),
    ("  averaged weights", "worker"),
    ("request x2", "worker"), ("ingest x2", "worker"), ("  verify + decode", "worker"),
    ("serve x2", "worker"), ("  verify + decode ", "worker"),
)


def layout(numel: int) -> list[tuple[int, ...]]:
    """The MLP's tensors at its size; otherwise ~50 tensors, as a larger model has."""
    w = MLPWorkload()
    if numel == w.param_count():
        return [tuple(p.shape) for p in w.build_model().parameters()]
    return [(numel // 50,)] * 49 + [(numel - 49 * (numel // 50),)]


class Params(Trainer):
    """Parameters in separate tensors, mixed through a full copy unless `add_in_place` (as the TTS trainer)."""

    def __init__(self, numel: int, seed: int, timer: "Timer", add_in_place: bool = False, step: int = 0) -> None:
        self._capabilities = Capabilities(add_in_place=add_in_place)
        g = torch.Generator().manual_seed(seed)
        self.params = [torch.randn(shape, generator=g) * 0.05 for shape in layout(numel)]
        self.timer, self.steps, self.g = timer, step, g

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def step_count(self) -> int:
        return self.steps

    def train(self) -> None:
        """A stand-in optimiser step (not timed): every parameter moves a little."""
        self.steps += 1
        for p in self.params:
            p.add_(torch.randn(p.shape, generator=self.g), alpha=1e-3)

    def step(self) -> StepStats:
        raise NotImplementedError

    def param_spec(self) -> ParamSpec:
        return {f"p{i}": (tuple(p.shape), "float32") for i, p in enumerate(self.params)}

    def get_flat_params(self) -> torch.Tensor:
        with self.timer.stage("  get_flat_params"):
            return flatten(self.params)

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """As the TTS trainer hands a publish its parameters where the node keeps none: rounded a
        tensor at a time, no float32 copy of them all."""
        with self.timer.stage("  get_flat_params"):
            return flatten_bf16(self.params, sum(p.numel() for p in self.params), generator, device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        with self.timer.stage("  set_flat_params"):
            unflatten_into(flat, self.params)

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
        with self.timer.stage("  add_to_flat_params"):
            add_flat_into(delta, self.params, start)

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        raise NotImplementedError

    def set_step_scale(self, scale: float) -> None:
        pass

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        raise NotImplementedError

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Timer:
    """Thread CPU seconds per stage, summed within a period; off while the partners work.

    `peaks`: for each top-level stage, the most the process's resident memory rose above its level
    at the stage's start (Linux: the peak is reset through /proc/self/clear_refs), over the periods
    timed: the temporaries a stage allocates, which the census of what a node keeps cannot see.
    """

    def __init__(self) -> None:
        self.on = False
        self.period: dict[str, float] = defaultdict(float)
        self.peaks: dict[str, int] = defaultdict(int)
        self.highest = 0
        self._wrapped: list[tuple[Any, str, Any]] = []

    def peak_of(self, name: str, fn: Callable[[], Any]) -> Any:
        """fn(), with the rise of resident memory it caused at its peak kept as `peaks[name]`.
        The process's own peak, which the reset forgets, is kept as `highest`."""
        self.highest = max(self.highest, status_bytes("VmHWM"))
        base = rss_peak_reset()
        try:
            return fn()
        finally:
            top = status_bytes("VmHWM")
            self.highest = max(self.highest, top)
            if self.on and base is not None:
                self.peaks[name] = max(self.peaks[name], top - base)

    def stage(self, name: str) -> "_Stage":
        return _Stage(self, name)

    def wrap(self, owner: Any, attr: str, name_now: Callable[[], str | None]) -> None:
        """Time `owner.attr` as the stage `name_now()` names at each call (None: not timed)."""
        original = getattr(owner, attr)
        self._wrapped.append((owner, attr, owner.__dict__[attr] if attr in vars(owner) else None))

        def timed(*args: Any, **kwargs: Any) -> Any:
            name = name_now()
            if name is None:
                return original(*args, **kwargs)
            with self.stage(name):
                return original(*args, **kwargs)

        setattr(owner, attr, timed)

    def restore(self) -> None:
        """Put back everything `wrap` replaced (a module's function, a class's method)."""
        for owner, attr, before in reversed(self._wrapped):
            if before is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, before)
        self._wrapped.clear()


def rss_peak_reset() -> int | None:
    """Reset this process's resident-memory peak to its present level and return that level; None
    where that cannot be done (not Linux, or not allowed): no stage peaks are taken there."""
    if not reset_peak():
        return None
    return status_bytes("VmRSS")


class _Stage:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.t0 = time.thread_time()

    def __exit__(self, *exc: Any) -> None:
        if self.timer.on:
            self.timer.period[self.name] += time.thread_time() - self.t0


def make_node(cfg: GossipConfig, seed: int, spec: ParamSpec, x0: torch.Tensor, metrics: Any = None) -> GossipNode:
    identity = Identity.generate(bytes([seed]) * 32)
    return GossipNode(cfg, identity, spec, x0, now=NOW, metrics=metrics, entropy=bytes([seed]) * 16)


def measure(numel: int, periods: int, compression: str, add_in_place: bool, held: int = 2,
            start_step: int = START_STEP,
            census: Callable[[GossipNode, list[GossipNode]], dict[str, Any]] | None = None,
            partner_steps: float | None = None, copy_dtype: str | None = None) -> dict[str, Any]:
    """The period's figures at `numel` parameters; `census(ours, partners)`, if given, is asked
    at the end what the nodes hold (benchmarks/scale.py) and its answer kept as "census".
    `partner_steps`, `copy_dtype`: those `GossipConfig` settings (None: their defaults)."""
    cfg = GossipConfig(swarm="cycle", compression=compression)
    if copy_dtype is not None:
        cfg = dataclasses.replace(cfg, copy_dtype=copy_dtype)
    if partner_steps is not None:
        cfg = dataclasses.replace(cfg, partner_steps=partner_steps)
    timer = Timer()
    ours = Params(numel, 1, timer, add_in_place, start_step)
    spec = ours.param_spec()
    x0 = flatten(ours.params)
    metrics = Metrics(process=False)
    a = make_node(cfg, 1, spec, x0, metrics)
    worker = NodeWorker(a, lambda: clock[0])  # its publish job, run here: the worker thread's work, timed alone
    partners = [make_node(cfg, 2 + i, spec, x0) for i in range(2)]
    for i in range(2, held):  # neighbours we hold a copy of and do not pull: they feed the averaged weights
        other = make_node(cfg, 2 + i, spec, x0)
        for _ in range(2):  # the first exchange only trades tickets; the second delivers its copy
            body = other.build_request(a.identity.public_key if a.identity.public_key in other.neighbours else None, NOW)
            answer, _ = a.handle_request(body, NOW, verified={other.identity.public_key})
            other.handle_response(answer, NOW)
    assert sum(n.copy.x_hat is not None for n in a.neighbours.values()) == held - 2, "a held neighbour's copy is missing"
    theirs = [Params(numel, 2 + i, timer, add_in_place, start_step) for i in range(2)]
    for t in theirs:
        for p, q in zip(t.params, ours.params):
            p.copy_(q)
    clock = [NOW]
    hook = BoundaryHook(Mixer(cfg, pulls=2), a.view_slot, worker.pending, lambda step, due: None, metrics,
                        cfg.publish_cadence(), lambda: clock[0])
    current = [""]  # the stage of ours running now: sub-stages count only inside their parent

    def sub(owner: Any, attr: str, names: dict[str, str]) -> None:
        timer.wrap(owner, attr, lambda: names.get(current[0]))

    sub(hook.mixer, "mix", {"boundary": "  mix"})
    sub(hook.mixer, "change", {"boundary": "  mix"})  # an add-in-place trainer's mix: weighed, then
    sub(MixChange, "piece", {"boundary": "  mix"})  # built a span at a time as the trainer adds it
    sub(node_module, "make_update_frame", {"publish": "  update frame"})
    for codec_class in (CodecBase, SparseCodec):  # the codec of a publish follows its period (peer.core.period_codec)
        sub(codec_class, "compress_sparse", {"publish": "    codec"})
    sub(messages_module, "encode_frame", {"publish": "    lz4 + sign"})
    sub(a.average, "update", {"publish": "  averaged weights"})
    # a frame's signature and header check, its payload's decode, and each control frame's (no nesting)
    for owner, attr in ((ingest_module, "check_frame"), (VerifiedFrame, "decode"), (node_module, "decode_frame")):
        sub(owner, attr, {"ingest x2": "  verify + decode", "serve x2": "  verify + decode "})

    def run(name: str, fn: Callable[[], Any]) -> Any:
        current[0] = name
        try:
            with timer.stage(name):
                return timer.peak_of(name, fn)
        finally:
            current[0] = ""

    key = a.identity.public_key
    rows: dict[str, list[float]] = defaultdict(list)
    wire = 0.0
    for period in range(periods + 3):  # the first three fill the copies and acknowledgements: not counted
        timer.on, timer.period = period >= 3, defaultdict(float)
        if period == 3:
            wire = metrics.total("bytes_sent_total") + metrics.total("bytes_received_total")
        clock[0] += PERIOD_S
        ours.train()
        run("boundary", lambda: hook(ours, StepStats(step=ours.steps, loss=0.0, samples=1)))
        assert run("publish", worker.publish_pending) is not None, "a publish is due every step"
        for node, t in zip(partners, theirs):
            t.train()
            node.publish(flatten(t.params), t.steps, clock[0])
        for node in partners:  # our two pulls: each answer brings that partner's new update
            peer_key = node.identity.public_key
            body = run("request x2", lambda: a.build_request(peer_key if peer_key in a.neighbours else None, clock[0]))
            answer, _ = node.handle_request(body, clock[0])
            run("ingest x2", lambda: a.handle_response(answer, clock[0]))
        for node in partners:  # each partner pulls us once per period, as we pull them
            body = node.build_request(key if key in node.neighbours else None, clock[0])
            answer, _ = run("serve x2", lambda: a.handle_request(body, clock[0]))
            node.handle_response(answer, clock[0])
        if timer.on:
            for name, _ in STAGES:
                rows[name].append(timer.period.get(name, 0.0))
    rows["worker"] = [sum(rows[n][i] for n in ("publish", "request x2", "ingest x2", "serve x2")) for i in range(periods)]
    rows["training"] = list(rows["boundary"])
    out: dict[str, Any] = {name: statistics.fmean(values) for name, values in rows.items()}
    out["update_bytes"] = a.last_publish_bytes
    # bytes our node sent and received per period: its two pulls and the two it answers
    out["wire_bytes"] = (metrics.total("bytes_sent_total") + metrics.total("bytes_received_total") - wire) / periods
    if census is not None:
        out["census"] = census(a, partners)
    out["copies_held"] = len(a.view_slot.current.copies)  # what the averaged weights read when they sample
    out["per_period"] = dict(rows)
    out["peaks"] = dict(timer.peaks)
    out["highest_rss"] = timer.highest
    timer.restore()
    return out


def mlp_step_seconds(steps: int) -> float:
    """Median thread CPU seconds of one head-to-head MLP step (batch 1024, Adam, one thread)."""
    w = MLPWorkload()
    task, model = w.task(0), w.build_model()
    opt = w.optimizer()(model.parameters())
    times = []
    for i in range(steps + 2):
        t0 = time.thread_time()
        batch = task.batch()
        opt.zero_grad()
        task.loss(model, batch).backward()
        opt.step()
        if i >= 2:
            times.append(time.thread_time() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=f"{MLPWorkload().param_count()},30000000")
    ap.add_argument("--periods", type=int, default=8)
    ap.add_argument("--start-step", type=int, default=START_STEP, help="the step the peers start at")
    ap.add_argument("--compression", default="topk:0.1+int8")
    ap.add_argument("--train-steps", type=int, default=9)
    ap.add_argument("--add-in-place", action="store_true",
                    help="the trainer adds the mix to its parameters in place (as the TTS trainer), no full copy")
    ap.add_argument("--held", type=int, default=2,
                    help="neighbour copies held (at least the 2 pulled; at most GossipConfig.max_neighbours): "
                         "the averaged weights read every one when they sample")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(describe())
    sizes = [int(s) for s in args.sizes.split(",")]
    step_s = mlp_step_seconds(args.train_steps)
    if not 2 <= args.held <= GossipConfig().max_neighbours:
        ap.error(f"--held must be in [2, {GossipConfig().max_neighbours}], got {args.held}")
    rows = {n: measure(n, args.periods, args.compression, args.add_in_place, args.held, args.start_step)
            for n in sizes}
    step_s = statistics.median([step_s, mlp_step_seconds(args.train_steps)])  # before and after: load drifts
    print(f"{args.compression}, {args.held} neighbour copies held, one torch thread, "
          f"thread CPU ms per publish period (mean of {args.periods}, from step {args.start_step}); "
          f"the trainer {'adds the mix in place' if args.add_in_place else 'mixes through a full parameter copy'}")
    print("| stage | thread | " + " | ".join(f"{n:,}" for n in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for name, thread in STAGES:
        label = "· " * ((len(name) - len(name.lstrip())) // 2) + name.strip()
        print(f"| {label} | {thread} | "
              + " | ".join(f"{rows[n][name] * 1e3:.2f}" for n in sizes) + " |")
    for name in ("worker", "training"):
        cells = " | ".join(f"{rows[n][name] * 1e3:.2f}" for n in sizes)
        print(f"| **{name} thread, whole period** | {name} | {cells} |")
    print(f"MLP training step (batch 1024, one thread): {step_s * 1e3:.1f} ms CPU")
    for n in sizes:
        r = rows[n]
        print(f"{n:,} params: protocol / training step = {(r['worker'] + r['training']) / step_s:.3f} "
              f"(worker {r['worker'] / step_s:.3f}, training thread {r['training'] / step_s:.3f}); "
              f"update frame {r['update_bytes'] / 1e3:.0f} kB")
    if args.json:
        args.json.write_text(json.dumps({"machine": describe(), "step_s": step_s,
                                         "rows": {str(n): r for n, r in rows.items()}}, indent=1))


if __name__ == "__main__":
    main()
