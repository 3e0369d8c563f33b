"""The corpus of a `[world.data]` run: a manifest, one `ShardPeer` per peer, and what it measures.

Peers that hold no shard do not run yet: like `gossip-tts peer --data swarm:HASH`, a peer's
fetcher starts on its bootstrap addresses and its gossip peer starts (joins, then trains)
once it holds a first shard. Measured: when each peer held its first shard and began
training, when every peer held every shard, and the shard bytes each peer uploaded.
"""

from __future__ import annotations

import hashlib
import statistics
from typing import Callable, Sequence

from simnet.driver.shard_peer import Corpus, GossipSide, ShardPeer
from simnet.world.data_config import DataConfig
from simnet.world.sim_world import SimWorld


def shard_hashes(n: int, seed: int) -> list[str]:
    """The SHA-256 of shards `shard-000000.tar`... in manifest order (by name), drawn from the seed."""
    return [hashlib.sha256(f"simnet-shard:{seed}:{i}".encode()).hexdigest() for i in range(n)]


def spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "max": None}
    return {"median": statistics.median(values), "max": max(values)}


class DataPlane:
    """Every slot's `ShardPeer`, started together; tells the swarm when a slot holds its first shard."""

    def __init__(self, cfg: DataConfig, world: SimWorld, seed: int, gossip: Sequence[GossipSide],
                 first_shard: Callable[[int], None]) -> None:
        self.cfg, self.world, self.gossip, self._first_shard = cfg, world, gossip, first_shard
        order = shard_hashes(cfg.shards, seed)
        self.corpus = Corpus(cfg, cfg.swarm_config(), order, hashlib.sha256("\n".join(order).encode()).hexdigest())
        self.peers: list[ShardPeer] = []
        for p in gossip:  # holders: checked by WorldConfig
            self.peers.append(ShardPeer(self.corpus, world, p, set(order) if p.index in cfg.holders else set(),
                                        self.peers, self.shard_added))
        self.replicated_at: float | None = None

    def holds_any(self, i: int) -> bool:
        return bool(self.peers[i].held)

    def start(self) -> None:
        for p in self.peers:
            p.start()

    def shard_added(self, i: int, first: bool) -> None:
        if first:
            self._first_shard(i)
        if self.replicated_at is None and all(p.complete_at is not None for p in self.peers):
            self.replicated_at = self.world.now()

    def replicated(self) -> bool:
        return self.replicated_at is not None

    def totals(self) -> dict:
        corpus = self.cfg.corpus_bytes
        holders = [p for p in self.peers if p.index in self.cfg.holders]
        fetchers = [p for p in self.peers if p.index not in self.cfg.holders]
        trained = [t for p in fetchers if (t := self.gossip[p.index].first_trained_at) is not None]
        first = [p.first_shard_at for p in fetchers if p.first_shard_at is not None]
        counts: dict[str, int] = {}
        for p in self.peers:
            for name, n in p.counts.items():
                counts[name] = counts.get(name, 0) + n
        moved = sum(p.bytes_sent for p in self.peers)
        return {
            "plan": self.cfg.plan,
            "shards": self.cfg.shards,
            "corpus_bytes": corpus,
            "peers_fetching": len(fetchers),
            "peers_training": len(trained),
            "train_start_s": spread(trained),
            "first_shard_s": spread(first),
            "peers_complete": sum(p.complete_at is not None for p in fetchers),
            "all_held_s": self.replicated_at,
            "seed_upload_x_corpus": sum(p.bytes_sent for p in holders) / corpus if corpus else None,
            "max_other_upload_x_corpus": max((p.bytes_sent for p in fetchers), default=0) / corpus if corpus else None,
            "shard_bytes_moved": moved,
            "moved_x_corpus": moved / corpus if corpus else None,
            "counts": dict(sorted(counts.items())),
        }
