"""The arms of benchmarks/lockstep_peers.py: N replicas in lockstep, joined by the peer's own
gossip code, by an exact average every H steps (local SGD), by DiLoCo's outer step every H
steps, by a mean gradient (DDP) or not at all (alone).

All arms of a run step together, one step at a time, on one draw of each rank's batches
(`Feed`): the arms differ only in how they join their replicas, and a batch (for the MLP, its
teacher's labels) is computed once however many arms there are.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from async_opt.sync import DiLoCoOuter, allreduce_mean
from peer.boundary import BoundaryHook, PendingPublish
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.metrics import Metrics
from peer.trainer import Capabilities, StepStats, flatten, flatten_bf16, unflatten_into
from protocol import Identity

TAIL_STEPS = 8
"""An arm's score: the replicas' mean held-out loss over its last TAIL_STEPS steps."""
T0 = 1_000_000.0


class Workload(Protocol):
    """What vs_workloads' MLPWorkload and TTSWorkload give an arm."""

    lr: float

    def build_model(self, seed: int | None = None) -> nn.Module: ...

    def optimizer(self) -> Any: ...

    def task(self, rank: int) -> Any: ...


class Feed:
    """Each rank's batch for the current step, drawn once from the rank's own stream."""

    def __init__(self, w: Workload) -> None:
        self.w = w
        self._streams: dict[int, Any] = {}
        self.current: dict[int, Any] = {}

    def advance(self, ranks: int) -> None:
        for rank in range(ranks):
            self.current[rank] = self._streams.setdefault(rank, self.w.task(rank)).batch()

    def task(self, rank: int) -> "FedTask":
        return FedTask(self, rank)


class FedTask:
    """A rank's task whose batch is the feed's current one; loss and held-out set its own."""

    def __init__(self, feed: Feed, rank: int) -> None:
        self.feed, self.rank, self.own = feed, rank, feed.w.task(rank)

    def batch(self) -> Any:
        return self.feed.current[self.rank]

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        return self.own.loss(model, batch)

    def eval_loss(self, model: nn.Module) -> float:
        return self.own.eval_loss(model)


class Replica:
    """One replica behind the parts of the Trainer seam the step boundary calls."""

    capabilities = Capabilities()

    def __init__(self, w: Workload, feed: Feed, rank: int) -> None:
        self.task, self.model = feed.task(rank), w.build_model()
        self.params = list(self.model.parameters())
        self.opt, self.lr, self.step_count = w.optimizer()(self.params), w.lr, 0

    def step(self) -> StepStats:
        self.opt.zero_grad()
        loss = self.task.loss(self.model, self.task.batch())
        loss.backward()
        self.opt.step()
        self.step_count += 1
        return StepStats(self.step_count, float(loss.detach()), 1)

    def get_flat_params(self) -> torch.Tensor:
        return flatten(self.params)

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        return flatten_bf16(self.params, sum(p.numel() for p in self.params), generator, device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        unflatten_into(flat, self.params)

    def set_step_scale(self, scale: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = self.lr * scale


def ring_bytes(numel: int, n: int, every: int, bytes_per_value: float) -> float:
    """Bytes one of n replicas sends per step for a ring all-reduce of `numel` values every `every` steps."""
    return 2 * (n - 1) / n * numel * bytes_per_value / every if n > 1 else 0.0


@dataclass
class Arm:
    """Replicas stepped together; `join(t)` runs after each step t. `wire` is what one replica
    sends per step: {label: bytes}."""

    replicas: list[Replica]
    steps: int
    wire: dict[str, float] = field(default_factory=dict)

    def step(self, t: int) -> None:
        for rep in self.replicas:
            rep.step()
        self.join(t)

    def join(self, t: int) -> None:
        pass

    def extra(self) -> dict[str, float]:
        return {}


class Alone(Arm):
    def __init__(self, w: Workload, feed: Feed, n: int, steps: int) -> None:
        super().__init__([Replica(w, feed, r) for r in range(n)], steps)


class DDP(Arm):
    """One replica (rank 0's held-out set) stepping on the mean loss of all n ranks' batches."""

    def __init__(self, w: Workload, feed: Feed, n: int, steps: int) -> None:
        super().__init__([Replica(w, feed, 0)], steps)
        self.tasks = [feed.task(r) for r in range(n)]
        numel = sum(p.numel() for p in self.replicas[0].params)
        self.wire = {"fp32": ring_bytes(numel, n, 1, 4)}

    def step(self, t: int) -> None:
        model = self.replicas[0]
        model.opt.zero_grad()
        (sum(task.loss(model.model, task.batch()) for task in self.tasks) / len(self.tasks)).backward()
        model.opt.step()


class Periodic(Arm):
    """Every `every` steps the replicas restart from one global point: the exact mean of their
    parameters (local SGD) or, with `outer`, DiLoCo's outer step on the mean pseudo-gradient.
    Each replica keeps its own Adam state, as DiLoCo's inner optimisers do."""

    def __init__(self, w: Workload, feed: Feed, n: int, steps: int, every: int, outer: DiLoCoOuter | None) -> None:
        super().__init__([Replica(w, feed, r) for r in range(n)], steps)
        self.every, self.outer = every, outer
        self.global_x = self.replicas[0].get_flat_params()
        numel = self.global_x.numel()
        self.wire = {"fp32": ring_bytes(numel, n, every, 4), "int8": ring_bytes(numel, n, every, 1)}

    def join(self, t: int) -> None:
        if (t + 1) % self.every:
            return
        xs = [rep.get_flat_params() for rep in self.replicas]
        self.global_x = allreduce_mean(xs) if self.outer is None else self.outer.step(self.global_x, xs)
        for rep in self.replicas:
            rep.set_flat_params(self.global_x)


def exchange(asker: GossipNode, answerer: GossipNode, now: float) -> int:
    """`asker` pulls `answerer` as a driver does (request, answer, ingest); the bytes both sent."""
    key = answerer.identity.public_key
    known = key in asker.neighbours or asker.held_tickets.get(key)[1] > 0
    request = asker.build_request(key if known else None, now)
    reply, _ = answerer.handle_request(request, now, verified={asker.identity.public_key})
    asker.handle_response(reply, now)
    return len(request) + len(reply)


class Gossip(Arm):
    """Each replica behind a real `GossipNode`, `BoundaryHook` and `Mixer`: the boundary mixes
    what its pulls brought and hands over a copy when a publish is due (every `gossip_every`
    steps); after each round of publishes every replica pulls `SessionConfig().pulls` random
    others through the node's own exchange code (signed, compressed frames). `late`: the pulls
    come a step after the publishes, so a replica mixes its partners' copies a step later, as an
    answer that comes back late brings them."""

    def __init__(self, w: Workload, feed: Feed, n: int, steps: int, cfg: GossipConfig, late: bool,
                 seed: int) -> None:
        super().__init__([Replica(w, feed, r) for r in range(n)], steps)
        cfg = cfg.for_trainer(Replica.capabilities.additive_steps)
        self.pulls = SessionConfig().for_partner_steps(cfg.partner_steps > 0).pulls
        self.late, self.rng, self.sent, self.published_last = late, random.Random(seed), 0, False
        self.nodes: list[GossipNode] = []
        self.pending: list[PendingPublish] = []
        self.hooks: list[BoundaryHook] = []
        for i, rep in enumerate(self.replicas):
            spec = {name: (tuple(p.shape), "float32") for name, p in rep.model.named_parameters()}
            node = GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), spec, rep.get_flat_params(), now=T0,
                              metrics=Metrics())
            self.nodes.append(node)
            self.pending.append(PendingPublish())
            self.hooks.append(BoundaryHook(Mixer(cfg, self.pulls), node.view_slot, self.pending[i],
                                           lambda step, due: None, Metrics(), cfg.publish_cadence(), lambda: T0,
                                           node.partner_steps.taken()))

    def pull_round(self, now: float) -> None:
        n = len(self.nodes)
        for i in range(n):
            for j in self.rng.sample([j for j in range(n) if j != i], min(self.pulls, n - 1)):
                self.sent += exchange(self.nodes[i], self.nodes[j], now)

    def step(self, t: int) -> None:
        now = T0 + t
        for rep, hook in zip(self.replicas, self.hooks):
            hook(rep, rep.step())
        if self.late and self.published_last:
            self.pull_round(now)
        published = False
        for node, slot in zip(self.nodes, self.pending):
            if (item := slot.take()) is not None:
                node.publish(item[0], item[1], now, item[2])
                slot.finished()  # as the worker says once a publish ends: else no copy is taken next step
                published = True
        if published and not self.late:
            self.pull_round(now)
        self.published_last = published
        self.wire = {"sent": self.sent / len(self.replicas) / (t + 1)}

    def extra(self) -> dict[str, float]:
        return {"step_scale": self.hooks[0].metrics.get("step_scale") or 1.0}


@dataclass
class Outcome:
    loss: float
    """The replicas' mean held-out loss over the arm's last TAIL_STEPS steps."""
    end: float
    """The replicas' mean held-out loss after its last step."""
    wire: dict[str, float]
    extra: dict[str, float]


def run(feed: Feed, n: int, arms: dict[str, Arm]) -> dict[str, Outcome]:
    """Step every arm to its own `steps`, all on the same batches; score each at its own end."""
    tails: dict[str, list[float]] = {name: [] for name in arms}
    for t in range(max(arm.steps for arm in arms.values())):
        feed.advance(n)
        for name, arm in arms.items():
            if t < arm.steps:
                arm.step(t)
                if t >= arm.steps - TAIL_STEPS:
                    tails[name].append(statistics.mean(r.task.eval_loss(r.model) for r in arm.replicas))
    return {name: Outcome(statistics.mean(tails[name]), tails[name][-1], dict(arm.wire), arm.extra())
            for name, arm in arms.items()}


def one(w: Workload, n: int, steps: int, kind: str, **kw: Any) -> Outcome:
    """A single arm run on its own (`kind`: alone, ddp, periodic or gossip; `kw` its settings)."""
    feed = Feed(w)
    make = {"alone": Alone, "ddp": DDP, "periodic": Periodic, "gossip": Gossip}[kind]
    return run(feed, n, {kind: make(w, feed, n, steps, **kw)})[kind]
