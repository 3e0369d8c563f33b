"""Simulated links: latency, bandwidth with uplink queueing, packet or message loss, partitions.

A message of B bytes from peer a to peer b occupies a's uplink for B / bandwidth (a
send waits behind the ones a already queued: concurrent sends serialise), then travels
for the link's latency. Packet loss costs TCP-style retransmissions (each round adds a
retransmission timeout and re-sends the lost packets); message loss drops the whole
message (the requester then times out). A partition drops every message between its
groups while it lasts, including those in flight when it starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from simnet.world.scheduler import Scheduler
from simnet.world.topology import Topology

LATENCY_DISTS = ("fixed", "uniform", "lognormal")
LOSS_MODES = ("packet", "message")


@dataclass
class LinkConfig:
    latency_s: float = 0.05
    """One-way latency of a LAN (or any non-WAN) link."""
    latency_dist: str = "fixed"
    """fixed | uniform (latency·[1−j, 1+j]) | lognormal (median latency, sigma j)."""
    latency_jitter: float = 0.0
    """The j of `latency_dist`."""
    bandwidth_mbps: float = 100.0
    """Uplink bandwidth of every peer, megabits per second."""
    loss: float = 0.0
    """Probability that a packet (or a whole message) is lost."""
    loss_mode: str = "packet"
    """packet (retransmitted, costs time) | message (dropped, the request times out)."""
    mtu_bytes: int = 1500
    rto_s: float = 0.2
    """Minimum retransmission timeout; a round of retransmissions waits max(rto, 2·latency)."""

    def __post_init__(self) -> None:
        if self.latency_s < 0 or self.latency_jitter < 0:
            raise ValueError("links.latency_s and links.latency_jitter must be >= 0")
        if self.latency_dist not in LATENCY_DISTS:
            raise ValueError(f"links.latency_dist must be one of {LATENCY_DISTS}, got {self.latency_dist!r}")
        if self.latency_dist == "uniform" and self.latency_jitter > 1:
            raise ValueError("links.latency_jitter must be <= 1 for a uniform latency")
        if not self.bandwidth_mbps > 0:
            raise ValueError(f"links.bandwidth_mbps must be > 0, got {self.bandwidth_mbps}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"links.loss must be in [0, 1), got {self.loss}")
        if self.loss_mode not in LOSS_MODES:
            raise ValueError(f"links.loss_mode must be one of {LOSS_MODES}, got {self.loss_mode!r}")
        if self.mtu_bytes < 100 or self.rto_s < 0:
            raise ValueError("links.mtu_bytes must be >= 100 and rto_s >= 0")


@dataclass
class PartitionConfig:
    start_s: float
    end_s: float
    """The partition heals at this virtual time."""
    groups: list[list[int]] = field(default_factory=list)
    """Peer indices of each side; peers named nowhere form one more group."""
    clusters: bool = False
    """Cut along the topology's clusters instead (each cluster its own side)."""
    attackers: bool = False
    """Cut the run's attackers (world.attack, chosen per seed) off from everyone else: the same
    honest peers as the attacked run, with no lie reaching them (what losing those peers costs)."""

    def __post_init__(self) -> None:
        if not 0 <= self.start_s < self.end_s:
            raise ValueError(f"partition needs 0 <= start_s < end_s, got {self.start_s}, {self.end_s}")
        if sum((bool(self.groups), self.clusters, self.attackers)) != 1:
            raise ValueError("a partition needs exactly one of `groups`, `clusters = true` or `attackers = true`")


class Partitions:
    """Answers whether a and b are cut off from each other at time t."""

    def __init__(self, cfgs: list[PartitionConfig], topo: Topology, attackers: frozenset[int] = frozenset()) -> None:
        """`attackers`: the run's attacking peers, for partitions that cut them off (none: no cut)."""
        self.spans: list[tuple[float, float, list[int]]] = []
        for cfg in cfgs:
            if cfg.clusters:
                side = list(topo.cluster)
            elif cfg.attackers:
                side = [int(i in attackers) for i in range(topo.n)]
            else:
                side = [len(cfg.groups)] * topo.n
                for g, members in enumerate(cfg.groups):
                    for i in members:
                        if 0 <= i < topo.n:
                            side[i] = g
            self.spans.append((cfg.start_s, cfg.end_s, side))

    def blocked(self, a: int, b: int, t: float) -> bool:
        return any(s <= t < e and side[a] != side[b] for s, e, side in self.spans)

    def heal_time(self, members: list[int], t: float) -> float:
        """Earliest time >= t when no partition separates any two of `members`."""
        while True:
            later = [e for s, e, side in self.spans if s <= t < e and len({side[i] for i in members}) > 1]
            if not later:
                return t
            t = max(later)


class SimLinks:
    """The transport: `send` schedules delivery (or loss) of a message of a given size."""

    def __init__(self, cfg: LinkConfig, topo: Topology, partitions: Partitions, sched: Scheduler, seed: int) -> None:
        self.cfg, self.topo, self.partitions, self.sched = cfg, topo, partitions, sched
        self.rng = np.random.default_rng([seed, 0x11E5])
        self.uplink_free = [0.0] * topo.n
        self.bytes_sent = [0] * topo.n
        self.messages_lost = 0
        self.packets_lost = 0

    def base_latency(self, a: int, b: int) -> float:
        return self.topo.cfg.wan_latency_s if self.topo.is_wan(a, b) else self.cfg.latency_s

    def bandwidth_bps(self, a: int, b: int) -> float:
        bw = self.cfg.bandwidth_mbps
        if self.topo.is_wan(a, b):
            bw = min(bw, self.topo.cfg.wan_bandwidth_mbps)
        return bw * 1e6

    def latency(self, a: int, b: int) -> float:
        lat, j = self.base_latency(a, b), self.cfg.latency_jitter
        if j == 0 or self.cfg.latency_dist == "fixed":
            return lat
        if self.cfg.latency_dist == "uniform":
            return lat * float(self.rng.uniform(1 - j, 1 + j))
        return lat * math.exp(float(self.rng.normal(0.0, j)))

    def send(self, src: int, dst: int, nbytes: int, deliver: Callable[[], None]) -> None:
        """Queue `nbytes` on src's uplink; call `deliver` at dst on arrival (not at all if lost)."""
        now = self.sched.now()
        self.bytes_sent[src] += nbytes
        if self.partitions.blocked(src, dst, now):
            self.messages_lost += 1
            return
        bw = self.bandwidth_bps(src, dst)
        lat = self.latency(src, dst)
        extra_delay, extra_bytes = 0.0, 0
        if self.cfg.loss > 0:
            if self.cfg.loss_mode == "message":
                if self.rng.random() < self.cfg.loss:
                    self.messages_lost += 1
                    return
            else:
                extra_delay, extra_bytes = self._retransmissions(nbytes, lat)
        start = max(now, self.uplink_free[src])
        done = start + 8.0 * (nbytes + extra_bytes) / bw
        self.uplink_free[src] = done
        arrive = done + lat + extra_delay

        def arrive_fn() -> None:
            if self.partitions.blocked(src, dst, self.sched.now()):
                self.messages_lost += 1
                return
            deliver()

        self.sched.at(arrive, arrive_fn)

    def _retransmissions(self, nbytes: int, lat: float) -> tuple[float, int]:
        """Delay and extra bytes of TCP-like recovery: rounds until no packet is lost."""
        lost = int(self.rng.binomial(max(1, math.ceil(nbytes / self.cfg.mtu_bytes)), self.cfg.loss))
        delay, extra = 0.0, 0
        while lost:
            self.packets_lost += lost
            delay += max(self.cfg.rto_s, 2 * lat)
            extra += lost * self.cfg.mtu_bytes
            lost = int(self.rng.binomial(lost, self.cfg.loss))
        return delay, extra

    def rtt(self, a: int, b: int) -> float:
        return self.base_latency(a, b) + self.base_latency(b, a)
