"""`SwarmDataConfig`: the settings of fetching, caching and serving corpus shards (`[swarm_data]`).

Imports nothing heavy: `gossip-tts peer --help` reads its defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class SwarmDataConfig:
    manifest: str | None = None
    """The manifest's body, a path or http(s) URL: checked against the swarm:HASH of --data, or with
    swarm-key:PUBKEY a signed manifest, refused unless that key signed it. A local manifest also makes
    the tars beside it this peer's own shards (served, never evicted). None: fetch it from the --peer
    addresses (by its hash, or the newest version the key signed that they offer)."""
    cache_dir: Path | None = None
    """Where fetched shards are kept; default: `<checkpoint-dir>/shards`."""
    cache_gb: float = 20.0
    """Fetched shards kept at most (GB, 10^9 bytes); the least recently used go first. Own shards
    beside a local --manifest do not count."""
    max_fetches: int = 2
    """Shards downloaded at once."""
    shard_deadline_s: float = 900.0
    """A shard not downloaded within this (from all its sources together) is given up for now."""
    stall_timeout_s: float = 30.0
    """A source that sends no byte for this long is left for the next one (the transfer resumes there)."""
    min_hold_s: float = 300.0
    """Outside a training pass (no trainer reading), a fetched shard is not evicted for this long.
    A pass never loses the shards it listed: the cache rotates when the next pass starts."""
    advert_every_s: float = 10.0
    """How often each neighbour is asked which shards it holds (GET /v1/shards)."""
    ban_s: float = 3600.0
    """A source whose bytes did not match the manifest is not asked again for this long."""
    max_uploads: int = 8
    """Shards served at once, to all askers together; more get 503."""
    max_uploads_per_address: int = 2
    """Shards served at once to one address; more get 429. Once half of `max_uploads` are in use, an
    address gets one at a time: the rest are shared, so a few addresses cannot hold them all."""
    upload_deadline_s: float = 900.0
    """A download of one of our shards that takes longer is cut off (a slow reader holds a slot no longer)."""
    upload_stall_s: float = 10.0
    """A download of ours whose reader takes no piece for this long is cut off: a reader that stops
    reading frees its slot for others within this (plus the few socket buffers it filled)."""
    min_upload_kb_s: float = 64.0
    """A download of ours slower than this (kB/s, 10^3 bytes) is cut off: each piece sent is at most
    what this rate moves in `upload_stall_s`, and must be taken within it. A reader that trickles
    holds a slot no longer than one that stops. 0: no minimum rate (pieces of 1 MiB)."""
    manifest_check_s: float = 60.0
    """With --data swarm-key:PUBKEY: how often the neighbours are asked for a newer signed manifest
    while training (one found is kept and used from the next start)."""
    max_upload_mb_s: float = 25.0
    """All shard uploads together send at most this many MB (10^6 bytes) a second (0: as fast as the
    network takes them). 25 MB/s (200 Mb/s) is above most WAN uplinks; on a LAN or loopback, serving
    without a cap took most of a 2-core machine from training (benchmarks/shard_serving.py;
    docs/benchmarks/peer.md#sharing-a-corpus-serving-and-seeding)."""

    def __post_init__(self) -> None:
        if self.cache_dir is not None:
            self.cache_dir = Path(self.cache_dir)
        if not self.cache_gb > 0:
            raise ValueError(f"cache_gb must be > 0, got {self.cache_gb}")
        for name in ("max_fetches", "max_uploads", "max_uploads_per_address"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("shard_deadline_s", "stall_timeout_s", "advert_every_s", "upload_deadline_s", "upload_stall_s",
                     "manifest_check_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.min_hold_s < 0 or self.ban_s < 0 or not self.max_upload_mb_s >= 0 or not self.min_upload_kb_s >= 0:
            raise ValueError("min_hold_s, ban_s, max_upload_mb_s and min_upload_kb_s must be >= 0")

    @property
    def cache_bytes(self) -> int:
        return int(self.cache_gb * 1e9)
