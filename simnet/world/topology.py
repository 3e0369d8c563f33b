"""Who may talk to whom: full mesh, random regular graph, ring, or LAN clusters joined by WAN links.

A topology seeds discovery: with `bootstrap = "topology"` a peer starts knowing its
topology neighbours (as a real peer learns addresses from mDNS or `--peer`) and learns the
rest by peer exchange, as a real peer does; any peer can reach any other unless a
partition cuts them. The clusters say which pairs are LAN or WAN links, which picks their
latency and bandwidth.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = ("full", "random_regular", "ring", "clusters")


@dataclass
class TopologyConfig:
    kind: str = "full"
    """full | random_regular | ring | clusters."""
    degree: int = 8
    """random_regular: neighbours per peer; ring: neighbours per peer (half on each side)."""
    n_clusters: int = 4
    """clusters: peers are split into this many LANs of consecutive indices."""
    wan_degree: int = 2
    """clusters: WAN neighbours per peer, drawn from the other clusters."""
    wan_latency_s: float = 0.08
    """clusters: one-way latency of a WAN link."""
    wan_bandwidth_mbps: float = 20.0
    """clusters: bandwidth cap of a WAN link (the uplink may be faster)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"topology.kind must be one of {KINDS}, got {self.kind!r}")
        if self.degree < 1 or self.n_clusters < 1 or self.wan_degree < 0:
            raise ValueError("topology.degree and n_clusters must be >= 1, wan_degree >= 0")
        if self.wan_latency_s < 0 or not self.wan_bandwidth_mbps > 0:
            raise ValueError("topology.wan_latency_s must be >= 0 and wan_bandwidth_mbps > 0")


class Topology:
    """Adjacency lists (sorted) and the cluster of every peer."""

    def __init__(self, cfg: TopologyConfig, n: int, seed: int) -> None:
        if n < 1:
            raise ValueError(f"a topology needs at least 1 peer, got {n}")
        self.cfg = cfg
        self.n = n
        rng = random.Random(f"simnet-topology:{seed}")
        self.cluster = [0] * n
        if cfg.kind == "full":
            edges = {(a, b) for a in range(n) for b in range(a + 1, n)}
        elif cfg.kind == "ring":
            half = max(1, min(cfg.degree // 2, (n - 1) // 2))
            edges = {tuple(sorted((a, (a + d) % n))) for a in range(n) for d in range(1, half + 1)}
        elif cfg.kind == "random_regular":
            edges = random_regular_edges(n, min(cfg.degree, n - 1), rng)
        else:
            k = min(cfg.n_clusters, n)
            self.cluster = [i * k // n for i in range(n)]
            edges = {(a, b) for a in range(n) for b in range(a + 1, n) if self.cluster[a] == self.cluster[b]}
            for a in range(n):
                others = [b for b in range(n) if self.cluster[b] != self.cluster[a]]
                for b in rng.sample(others, min(cfg.wan_degree, len(others))):
                    edges.add((min(a, b), max(a, b)))
        self.adj: list[list[int]] = [[] for _ in range(n)]
        for a, b in sorted(edges):
            self.adj[a].append(b)
            self.adj[b].append(a)
        for lst in self.adj:
            lst.sort()

    def is_wan(self, a: int, b: int) -> bool:
        return self.cluster[a] != self.cluster[b]

    def neighbours(self, i: int) -> list[int]:
        return self.adj[i]

    def ring_order(self) -> list[int]:
        """The order a ring all-reduce visits peers in: by index, so clusters stay contiguous."""
        return list(range(self.n))


def random_regular_edges(n: int, d: int, rng: random.Random) -> set[tuple[int, int]]:
    """A random d-regular simple graph (Steger–Wormald: pair random free stubs, restart when stuck).

    When n·d is odd one peer gets degree d−1. Falls back to a ring plus random chords after
    many failed attempts, which only happens for graphs that are nearly complete.
    """
    for _ in range(100):
        stubs = [v for v in range(n) for _ in range(d)]
        if len(stubs) % 2:
            stubs.pop()
        edges: set[tuple[int, int]] = set()
        while stubs:
            for _ in range(200):
                i, j = rng.randrange(len(stubs)), rng.randrange(len(stubs))
                a, b = stubs[i], stubs[j]
                if a != b and (min(a, b), max(a, b)) not in edges:
                    break
            else:
                break  # stuck: restart
            edges.add((min(a, b), max(a, b)))
            for k in sorted((i, j), reverse=True):
                stubs[k] = stubs[-1]
                stubs.pop()
        if not stubs:
            return edges
    edges = {(min(a, (a + 1) % n), max(a, (a + 1) % n)) for a in range(n)}
    while len(edges) < n * d // 2:
        a, b = rng.sample(range(n), 2)
        edges.add((min(a, b), max(a, b)))
    return edges
