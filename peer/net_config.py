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

    def __post_init__(self) -> None:
        parse_address(self.listen, listener=True)
        for address in self.peers:
            parse_address(address)
        self.peers = list(self.peers)

