"""`[world.data]`: a corpus of shards that peers must fetch from each other before they train.

With `shards > 0` only the `holders` start with the corpus; every other peer starts empty,
fetches shards over the simulated links with the real fetcher's decisions
(`peer.shards.plan`), and starts (joins, then trains) once it holds one, as
`gossip-tts peer --data swarm:HASH` waits for a first shard. `plan = "seed_only"` is a
control: each peer reads the corpus in manifest order from its bootstrap address (the seed)
alone, never from another holder.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from peer.shards.config import SwarmDataConfig

PLANS = ("swarm", "seed_only")
_NOT_SIMULATED = {"manifest", "cache_dir", "min_hold_s", "upload_deadline_s", "upload_stall_s", "min_upload_kb_s",
                  "max_upload_mb_s", "manifest_check_s"}
"""SwarmDataConfig fields simnet does not model: refused, so a scenario cannot set one and believe it
acted (no files; a cache that holds the corpus evicts nothing; uploads are bounded by the links alone;
no signed manifests are watched)."""


@dataclass
class DataConfig:
    shards: int = 0
    """Shards in the corpus; 0: no corpus to fetch, every peer trains from the start."""
    shard_mb: float = 50.0
    """Size of each shard (MB, 10^6 bytes)."""
    holders: list[int] = field(default_factory=lambda: [0])
    """Peers that hold the whole corpus at the start (the seed)."""
    plan: str = "swarm"
    """swarm: `peer.shards.plan` as a real peer runs it (rotated order, adverts of every verified
    neighbour, partial holders before the seed); seed_only (control): manifest order, from the
    bootstrap address alone."""
    fetch: dict[str, Any] = field(default_factory=dict)
    """SwarmDataConfig fields: max_fetches, advert_every_s, max_uploads, max_uploads_per_address,
    stall_timeout_s, shard_deadline_s, ban_s, cache_gb (the real peer's defaults otherwise)."""
    segment_kib: int = 256
    """A transfer is sent in segments of this size (the real server reads and writes 256 KiB at a
    time); a peer's concurrent uploads interleave segment by segment on its uplink."""
    window: int = 4
    """Segments of one transfer in flight at once (TCP's window): the next one leaves when the
    receipt of the oldest has come back."""
    stop_when_held: bool = True
    """End the run at the first sample at which every peer holds every shard."""

    def __post_init__(self) -> None:
        if self.shards < 0 or not self.shard_mb > 0:
            raise ValueError(f"data.shards must be >= 0 and data.shard_mb > 0, got {self.shards}, {self.shard_mb}")
        if self.shards and not self.holders:
            raise ValueError("data.holders must name at least one peer that holds the corpus")
        if self.plan not in PLANS:
            raise ValueError(f"data.plan must be one of {PLANS}, got {self.plan!r}")
        if self.segment_kib < 1 or self.window < 1:
            raise ValueError("data.segment_kib and data.window must be >= 1")
        cfg = self.swarm_config()
        if self.shards and cfg.cache_bytes < self.corpus_bytes:
            raise ValueError(f"data.fetch.cache_gb ({cfg.cache_gb}) must hold the corpus ({self.corpus_bytes / 1e9:g} GB): "
                             "simnet does not model eviction")

    def swarm_config(self) -> SwarmDataConfig:
        known = {f.name for f in dataclasses.fields(SwarmDataConfig)} - _NOT_SIMULATED
        unknown = set(self.fetch) - known
        if unknown:
            raise ValueError(f"unknown data.fetch setting(s) {sorted(unknown)}; known: {sorted(known)}")
        return SwarmDataConfig(**self.fetch)

    @property
    def shard_bytes(self) -> int:
        return int(self.shard_mb * 1e6)

    @property
    def corpus_bytes(self) -> int:
        return self.shards * self.shard_bytes
