"""Configuration of the gossip layer of one peer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GossipConfig:
    swarm: str = "default"
    """Peers only talk to peers of the same swarm (and the same model fingerprint)."""
    gossip_every: int = 4
    """Local steps between publishing an update and starting an exchange."""
    compression: str = "topk:0.01+int8"
    """Tensor codec spec for published updates (see protocol.parse_codec)."""
    staleness: str = "pipemare:K=2000,p_min=0,gamma=0.5,tau_max=64"
    """Staleness schedule spec (see async_opt.parse_staleness)."""
    max_neighbours: int = 8
    """Neighbour copies kept in memory; the least recently heard-from is dropped."""
    outbox_bytes: int = 256 * 2**20
    """Recent update frames kept to fill a neighbour's gap without a full snapshot."""
    clip_quantile: float = 0.9
    """Self-centred clipping radius = quantile of recent neighbour distances × clip_multiplier."""
    clip_multiplier: float = 2.0
    clip_window: int = 64
    clip: bool = True
    max_clock_skew_s: float = 300.0
    allowed_keys: frozenset[bytes] | None = None
    """When set, frames from any other key are refused."""

    def __post_init__(self) -> None:
        if not self.swarm or len(self.swarm) > 64:
            raise ValueError(f"swarm name must be 1..64 characters, got {self.swarm!r}")
        if self.gossip_every < 1:
            raise ValueError(f"gossip_every must be >= 1, got {self.gossip_every}")
        if self.max_neighbours < 1:
            raise ValueError(f"max_neighbours must be >= 1, got {self.max_neighbours}")
        if self.outbox_bytes < 0:
            raise ValueError(f"outbox_bytes must be >= 0, got {self.outbox_bytes}")
        if not 0.0 < self.clip_quantile <= 1.0 or self.clip_multiplier <= 0:
            raise ValueError("clip_quantile must be in (0, 1] and clip_multiplier > 0")
        if self.max_clock_skew_s <= 0:
            raise ValueError("max_clock_skew_s must be > 0")
        # Parse now so a bad spec fails at start-up with its own message, not mid-run.
        from async_opt import parse_staleness
        from protocol import parse_codec

        parse_codec(self.compression)
        parse_staleness(self.staleness)
