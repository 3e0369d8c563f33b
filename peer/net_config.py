"""Where a real (aiohttp + mDNS) peer listens and whom it asks first.

Timeouts, cadences and joining are the session's (`peer.core.config.SessionConfig`), shared
with simnet; only what exists for real sockets lives here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from peer.discovery import parse_address


@dataclass
class NetConfig:
    listen: str = "0.0.0.0:0"
    """HOST:PORT to serve on; port 0 picks any free port (the chosen one is printed)."""
    advertise_host: str | None = None
    """Address others should dial; default: the listen host, or this machine's LAN IP for 0.0.0.0."""
    peers: list[str] = field(default_factory=list)
    """Bootstrap HOST:PORT addresses (--peer); the rest is learned by peer exchange."""
    mdns: bool = True
    mdns_interfaces: list[str] | None = None
    """IPs whose interfaces carry mDNS; None: all interfaces."""
    seed: int = 0
    """Seeds the choice of neighbours."""
    max_requests_per_address: int = 4
    """Requests one remote address may have open at once; more get 429. With the body cap
    this bounds what one address can make us buffer (4 frame limits)."""
    body_read_timeout_s: float = 30.0
    """A request body not fully received within this is dropped (slow senders hold nothing)."""
    state_every_s: float = 10.0
    """One GET /v1/state per remote address per this many seconds; more get 429."""
    trusted_keys: str | None = None
    """A file of public keys (hex, one per line, # comments): only these peers are talked to."""

    def __post_init__(self) -> None:
        parse_address(self.listen, listener=True)
        for address in self.peers:
            parse_address(address)
        self.peers = list(self.peers)
        if self.max_requests_per_address < 1:
            raise ValueError(f"max_requests_per_address must be >= 1, got {self.max_requests_per_address}")
        if not (self.body_read_timeout_s > 0 and self.state_every_s >= 0):
            raise ValueError("body_read_timeout_s must be > 0 and state_every_s >= 0")

