"""The gossip method: a swarm of real peer cores (each driven by a SimPeer) over simulated links."""

from __future__ import annotations

import hashlib
import math
import random

import torch

from async_opt import consensus_distance
from peer.metric_help import SIMNET_TOTALS
from peer.metrics import Metrics
from peer.trainer import Trainer
from protocol import Identity, RefusalReason
from simnet.attacks.build import build_peer
from simnet.driver.data_plane import DataPlane
from simnet.driver.sim_peer import SimPeer
from simnet.runs.config import WorldConfig
from simnet.world.churn import ChurnEvent, churn_events
from simnet.world.links import Partitions, SimLinks
from simnet.world.models import get_model
from simnet.world.scheduler import Scheduler, VirtualClock
from simnet.world.sim_world import AddressBook, SimWorld
from simnet.world.speed import SpeedModel
from simnet.world.topology import Topology


def identity_for(seed: int, index: int) -> Identity:
    """A fixed key per (seed, peer slot): same run, same keys, same signatures."""
    return Identity.generate(hashlib.blake2b(f"simnet-key:{seed}:{index}".encode(), digest_size=32).digest())


def bootstrap_lists(mode: str, topo: Topology, n: int, seed: int) -> list[list[int]]:
    """The slots whose addresses each slot starts with.

    `topology`: a peer's topology neighbours, as mDNS on its LAN would report them;
    `one`: one random address of a peer that was there before it (peer 0 gets one of
    any other), as a user joining with a single `--peer` of someone already in the swarm;
    `first`: peer 0's address (peer 0 gets none), as every user given the first peer's.
    (Addresses drawn from all peers alike can split the swarm into parts that never hear
    of each other.)"""
    if mode == "topology":
        return [list(topo.neighbours(i)) for i in range(n)]
    if mode == "first":
        return [[]] + [[0] for _ in range(1, n)]
    rng = random.Random(f"simnet-bootstrap:{seed}")
    return [[rng.randrange(1, n)]] + [[rng.randrange(i)] for i in range(1, n)]


class GossipSim:
    """Builds the world from a WorldConfig and advances it event by event."""

    method = "gossip"

    def __init__(self, world: WorldConfig, seed: int) -> None:
        n = world.n_peers
        self.world_cfg, self.seed = world, seed
        self.sched = Scheduler()
        topo = Topology(world.topology, n, seed)
        attackers = frozenset(world.attack.attackers(n, seed))
        self.links = SimLinks(world.links, topo, Partitions(world.partitions, topo, attackers), self.sched, seed)
        self.attack = world.attack
        entry = get_model(world.model)
        self._factory = entry.factory
        self.evaluate = entry.evaluator(n, seed, **world.model_args) if entry.evaluator else None
        self.all_metrics: list[Metrics] = []
        self.churn_counts = {"crash": 0, "leave": 0, "join": 0}
        self.book = AddressBook(bootstrap_lists(world.bootstrap, topo, n, seed))
        self.world = SimWorld(seed=seed, sched=self.sched, clock=VirtualClock(self.sched), links=self.links,
                              cost=world.cost, speed=SpeedModel(world.speed, n, seed), book=self.book,
                              new_metrics=self._new_metrics)
        """What every simulated peer is handed (it never sees this swarm)."""
        gossip_cfg, session_cfg = world.gossip_config(), world.session_config()
        self.peers = [build_peer(self.world, i, identity_for(seed, i), gossip_cfg, session_cfg, world.attack,
                                 attacker=i in attackers) for i in range(n)]
        for p in self.peers:
            self.book.add(p)
        order = list(range(n))
        random.Random(f"simnet-eval:{seed}").shuffle(order)
        self._eval_order = order
        self.data = DataPlane(world.data, self.world, seed, self.peers, self.data_arrived) if world.data.shards else None
        """With a corpus to fetch, a peer starts once it holds a shard (`data_arrived`)."""
        for p in self.peers:
            if self.data is None or self.data.holds_any(p.index):
                p.start(self.make_trainer(p.index), join=False)
        if self.data is not None:
            self.data.start()
        for ev in churn_events(world.churn, n, world.duration_s, seed):
            self.sched.at(ev.t, lambda ev=ev: self._churn(ev))

    @property
    def peer_steps(self) -> int:
        """Training steps taken by every peer so far."""
        return sum(p.steps for p in self.peers)

    def now(self) -> float:
        return self.sched.now()

    def _new_metrics(self) -> Metrics:
        m = Metrics()
        self.all_metrics.append(m)
        return m

    def make_trainer(self, i: int) -> Trainer:
        """Slot i's honest trainer (an attacking peer wraps it in its lie when it starts)."""
        return self._factory(i, self.world_cfg.n_peers, self.seed, **self.world_cfg.model_args)

    def data_arrived(self, i: int) -> None:
        """Peer i holds its first shard: its gossip peer starts, joining the swarm (fetching the
        state of the furthest-along peer) as a real peer that starts late does."""
        peer = self.peers[i]
        if not peer.online:
            peer.start(self.make_trainer(i), join=self.world_cfg.churn.fetch_state)

    def finished(self) -> bool:
        """Whether the run has shown what it is for: every peer holds every shard (`data.stop_when_held`)."""
        return self.data is not None and self.world_cfg.data.stop_when_held and self.data.replicated()

    def _churn(self, ev: ChurnEvent) -> None:
        peer = self.peers[ev.peer]
        if ev.action == "join":
            if not peer.online:
                self.churn_counts["join"] += 1
                peer.start(self.make_trainer(ev.peer), join=self.world_cfg.churn.fetch_state)
        elif peer.online:
            self.churn_counts[ev.action] += 1
            peer.stop(ev.action)

    # ------------------------------------------------------------------ driving and observing
    def advance_to(self, t: float) -> None:
        self.sched.run_until(t)

    def _honest_online(self) -> list[SimPeer]:
        return [p for p in self.peers if p.online and not p.attacker]

    def sample(self) -> dict:
        """One metrics row: loss over (up to eval_peers) honest online peers, consensus, traffic."""
        honest = self._honest_online()
        chosen = [p for p in (self.peers[i] for i in self._eval_order) if p.online and not p.attacker and not p.joining]
        chosen = chosen[: self.world_cfg.eval_peers]
        losses = [self._loss(p) for p in chosen]
        finite = [x for x in losses if math.isfinite(x)]
        live = [x for p in honest if not p.diverged and not p.joining and (x := p.honest_params()) is not None]
        return {
            "t": self.now(),
            "loss": (sum(finite) / len(finite) if len(finite) == len(losses) else math.inf) if losses else None,
            "loss_of_mean": self._loss_of_mean(live),
            "loss_min": min(finite) if finite else None,
            "loss_max": max(finite) if finite else None,
            "consensus": consensus_distance(live) if len(live) >= 2 else 0.0,
            "bytes_per_peer": sum(self.links.bytes_sent) / self.world_cfg.n_peers,
            "peer_steps": self.peer_steps,
            "online": sum(p.online for p in self.peers),
            "diverged": sum(p.diverged for p in honest),
        }

    def _loss_of_mean(self, live: list[torch.Tensor]) -> float | None:
        """The loss of the honest peers' mean parameters: how far `loss` is from it is the part of
        the peers' loss their disagreement costs (the consensus error), the rest the swarm's own."""
        if self.evaluate is None or not live:
            return None
        mean = torch.stack(live).mean(0)
        if not bool(torch.isfinite(mean).all()):
            return math.inf
        value = self.evaluate(mean)
        return value if math.isfinite(value) else math.inf

    def _loss(self, p: SimPeer) -> float:
        if p.diverged:
            return math.inf
        if self.evaluate is None:
            return p.loss_ema if p.loss_ema is not None else math.inf
        x = p.honest_params()
        if x is None or not bool(torch.isfinite(x).all()):
            return math.inf
        value = self.evaluate(x)
        return value if math.isfinite(value) else math.inf

    def close(self) -> None:
        """Release every live trainer (data streams may hold threads or files)."""
        for p in self.peers:
            if p.trainer is not None:
                p.trainer.close()

    def staleness(self) -> list[float]:
        return [v for m in self.all_metrics for v in m.recent("mixed_staleness_steps")]

    def totals(self) -> dict:
        """Counters summed over every peer incarnation, plus link and churn statistics."""
        out = {name.removesuffix("_total"): sum(m.total(name) for m in self.all_metrics) for name in SIMNET_TOTALS}
        refused = {}
        for reason in RefusalReason:
            k = sum(m.get("frames_refused_total", reason=reason.value) for m in self.all_metrics)
            if k:
                refused[reason.value] = k
        out["frames_refused"] = refused
        out["bytes_sent"] = sum(m.total("bytes_sent_total") for m in self.all_metrics)
        out["messages_lost"] = self.links.messages_lost
        out["packets_lost"] = self.links.packets_lost
        out["churn"] = dict(self.churn_counts)
        live = sorted(p.verified_neighbours() for p in self._honest_online())
        out["verified_neighbours_min"] = live[0] if live else 0
        out["verified_neighbours_median"] = live[len(live) // 2] if live else 0
        out["attackers"] = sum(p.attacker for p in self.peers)
        partners = [[self.book.index_of(a) is not None for a in p.session.partners] for p in self._honest_online() if p.session]
        out["partners_made_up"] = sum(len(ps) - sum(ps) for ps in partners)  # held by addresses nothing listens at
        out["partners_real_min"] = min((sum(ps) for ps in partners), default=0)
        if self.data is not None:
            out["data"] = self.data.totals()
        return out
