"""The synchronous baselines, over the same speed model and links as the gossip swarm.

- allreduce (DDP): every round each peer takes one real step from the shared parameters;
  the round ends when the slowest peer has finished plus the time of a ring all-reduce,
  `2(n−1)/n · bytes / bandwidth + 2(n−1) · latency` (bandwidth: the slowest link on the
  ring; latency: the longest); then the replicas are averaged. For plain SGD from equal
  parameters, averaging the stepped replicas is exactly averaging the gradients:
  mean_i(x − lr·g_i) = x − lr·mean_i(g_i). With one peer this is a single process
  training alone: the formula's cost is 0 and the mean of one replica is that replica.
- diloco (Douillard et al. 2023): each round every peer takes H real inner steps, the
  pseudo-gradients are all-reduced (same cost formula) and `async_opt.DiLoCoOuter` takes
  a Nesterov step on the global parameters, which every peer then starts from.

sparseloco and noloco (simnet/runs/low_comm.py) change what a diloco round sends.

A partition that cuts the ring stalls a round until it heals. Packet loss and churn are
not modelled here (TCP hides small loss; a ring with a crashed member needs a restart
that these baselines do not attempt), so scenarios with churn or attackers compare gossip
runs only.
"""

from __future__ import annotations

import math

import torch

from async_opt import DiLoCoOuter, allreduce_mean
from simnet.runs.config import WorldConfig
from simnet.world.links import Partitions, SimLinks
from simnet.world.models import get_model
from simnet.world.scheduler import Scheduler
from simnet.world.speed import SpeedModel
from simnet.world.topology import Topology


def ring_allreduce_s(links: SimLinks, order: list[int], nbytes: int) -> float:
    """Time of a ring all-reduce of `nbytes` per peer: reduce-scatter then all-gather."""
    n = len(order)
    hops = [(order[k], order[(k + 1) % n]) for k in range(n)]
    bw = min(links.bandwidth_bps(a, b) for a, b in hops)
    lat = max(links.base_latency(a, b) for a, b in hops)
    return 2 * (n - 1) / n * nbytes * 8 / bw + 2 * (n - 1) * lat


class SyncSim:
    """allreduce (H = 1, plain averaging) or diloco (H inner steps, Nesterov outer step).

    Subclasses change what a round sends (`_comm_s`, `_outer`) and how the peers are scored
    (`_scores`); the rounds, their timing and the inner steps are this class's."""

    METHODS: tuple[str, ...] = ("allreduce", "diloco")

    def __init__(self, world: WorldConfig, seed: int, method: str) -> None:
        if method not in self.METHODS:
            raise ValueError(f"{type(self).__name__}: unknown method {method!r}")
        n = world.n_peers
        self.world, self.seed, self.method = world, seed, method
        entry = get_model(world.model)
        self.trainers = [entry.factory(i, n, seed, **world.model_args) for i in range(n)]
        self.evaluate = entry.evaluator(n, seed, **world.model_args) if entry.evaluator else None
        self.x = self.trainers[0].get_flat_params()
        for tr in self.trainers[1:]:
            tr.set_flat_params(self.x)
        self.speed = SpeedModel(world.speed, n, seed)
        topo = Topology(world.topology, n, seed)
        self.partitions = Partitions(world.partitions, topo)
        self.links = SimLinks(world.links, topo, self.partitions, Scheduler(), seed)
        self.order = topo.ring_order()
        self.nbytes = 4 * self.x.numel()
        self.inner = 1 if method == "allreduce" else world.diloco.inner_steps
        d = world.diloco
        self.outer = DiLoCoOuter(d.outer_lr, d.momentum, d.nesterov) if method == "diloco" else None
        self.comm_s = self._comm_s()
        self.t_ready = 0.0
        self._pending: float | None = None
        self.rounds = 0
        self.peer_steps = 0
        self.bytes_per_peer = 0.0
        self.stalled_s = 0.0
        self._losses = [math.nan] * n
        self._cache: tuple[int, dict[str, float]] | None = None

    def _next_end(self) -> float:
        if self._pending is None:
            compute = max(sum(self.speed.step_time(i) for _ in range(self.inner)) for i in range(len(self.trainers)))
            start = self.t_ready + compute
            comm_start = self.partitions.heal_time(self.order, start)
            self.stalled_s += comm_start - start
            self._pending = comm_start + self.comm_s
        return self._pending

    def advance_to(self, t: float) -> None:
        while self._next_end() <= t:
            self._round()
            assert self._pending is not None
            self.t_ready, self._pending = self._pending, None

    def _round(self) -> None:
        for i, tr in enumerate(self.trainers):
            for _ in range(self.inner):
                self._losses[i] = tr.step().loss
        self.peer_steps += self.inner * len(self.trainers)
        self.bytes_per_peer += self._outer([tr.get_flat_params() for tr in self.trainers])
        self.rounds += 1

    def _comm_s(self) -> float:
        """Seconds a round's communication takes: here a ring all-reduce of the parameters."""
        return ring_allreduce_s(self.links, self.order, self.nbytes)

    def _outer(self, xs: list[torch.Tensor]) -> float:
        """The end of a round: every peer from the reduced parameters; returns the bytes each
        peer sent (a ring all-reduce's 2(n−1)/n of the parameters)."""
        self.x = self.outer.step(self.x, xs) if self.outer is not None else allreduce_mean(xs)
        for tr in self.trainers:
            tr.set_flat_params(self.x)
        n = len(self.trainers)
        return 2 * (n - 1) / n * self.nbytes

    def now(self) -> float:
        return self.t_ready

    def _eval(self, x: torch.Tensor, fallback: float) -> float:
        value = self.evaluate(x) if self.evaluate is not None and bool(torch.isfinite(x).all()) else fallback
        return value if math.isfinite(value) else math.inf

    def _scores(self) -> dict[str, float]:
        """Loss of the peers' own parameters (mean, min, max), of their mean model, and their
        consensus distance: every peer holds the reduced parameters here."""
        loss = self._eval(self.x, sum(self._losses) / len(self._losses))
        return {"loss": loss, "loss_of_mean": loss, "loss_min": loss, "loss_max": loss, "consensus": 0.0}

    def sample(self) -> dict:
        if self._cache is None or self._cache[0] != self.rounds:
            self._cache = (self.rounds, self._scores())
        return {
            "t": self.t_ready, **self._cache[1],
            "bytes_per_peer": self.bytes_per_peer, "peer_steps": self.peer_steps,
            "online": len(self.trainers), "diverged": 0,
        }

    def close(self) -> None:
        for tr in self.trainers:
            tr.close()

    def staleness(self) -> list[float]:
        return []

    def finished(self) -> bool:
        return False  # the baselines run their full duration

    def totals(self) -> dict:
        return {"rounds": self.rounds, "round_comm_s": self.comm_s, "stalled_by_partition_s": self.stalled_s,
                "inner_steps": self.inner}
