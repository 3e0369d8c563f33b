"""Network configuration of a real (aiohttp + mDNS) peer."""

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
    request_timeout_s: float = 60.0
    """Whole-request timeout for an exchange; a slow neighbour never blocks training."""
    hello_every_s: float = 5.0
    """Seconds between peer-exchange rounds (GET /v1/hello to a random neighbour)."""
    join: bool = True
    """At start, adopt the state of a neighbour that is further along."""
    join_wait_s: float = 2.0
    """How long to look for neighbours before training starts (when joining)."""
    seed: int = 0
    """Seeds the choice of neighbours."""

    def __post_init__(self) -> None:
        parse_address(self.listen, listener=True)
        for address in self.peers:
            parse_address(address)
        if self.request_timeout_s <= 0 or self.hello_every_s <= 0 or self.join_wait_s < 0:
            raise ValueError("request_timeout_s and hello_every_s must be > 0, join_wait_s >= 0")
        self.peers = list(self.peers)

