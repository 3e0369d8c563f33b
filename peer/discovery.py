"""The Discovery seam: how a peer learns which addresses may hold other peers.

A discovery source only *suggests* peers. Nothing it reports is trusted: the peer verifies
each one with a signed /v1/hello before it gossips, and the neighbour table's failure
detection drops whatever never answers. That is why every source can be simple and
lossy (mDNS packets get dropped, `--peer` addresses may be wrong, exchanged lists may lie).

Events are delivered by two plain callbacks given at construction, `on_found(PeerInfo)`
and `on_lost(PeerInfo)`. They are called on the event loop thread, must not block and
should not raise (a raising callback is logged and ignored, so one bad consumer cannot stop
discovery). Callbacks rather than a queue because the usual consumer, the neighbour table,
is a pure object updated in place: a queue would only add a task that drains it.
`on_lost` gets the last PeerInfo reported for that peer, so the consumer can key on
`address` (what the neighbour table does) or on `peer_id`.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, runtime_checkable

log = logging.getLogger(__name__)

PEER_ID_HEX_LEN = 64
"""An Ed25519 public key is 32 bytes: 64 lowercase hex characters."""

SOURCES = ("mdns", "static", "exchange")
"""Where a PeerInfo came from: a LAN announcement, a `--peer` flag, another peer's hello."""

_HEX_ID = re.compile(r"[0-9a-f]{64}")
_HOST = re.compile(r"[A-Za-z0-9._-]+")

OnFound = Callable[["PeerInfo"], None]
OnLost = Callable[["PeerInfo"], None]


def is_peer_id(text: object) -> bool:
    """Whether `text` is a peer id: an Ed25519 public key as 64 lowercase hex characters."""
    return isinstance(text, str) and _HEX_ID.fullmatch(text) is not None


def parse_address(address: str, *, listener: bool = False) -> tuple[str, int]:
    """Split "host:port" (or "[v6]:port") into host and port, or raise ValueError naming it.

    Port 0 is refused unless `listener`: it means "any port" to a listener but nothing to a client.
    """
    if not isinstance(address, str):
        raise ValueError(f"peer address must be a string 'HOST:PORT', got {address!r}")
    host, sep, port_text = address.rpartition(":")
    if not sep or not host:
        raise ValueError(f"peer address {address!r} is not 'HOST:PORT'")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"peer address {address!r}: unbalanced '[' around an IPv6 host")
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"peer address {address!r}: {host!r} is not an IPv6 address") from None
    elif not _HOST.fullmatch(host):
        raise ValueError(f"peer address {address!r}: bad host {host!r} (IPv6 hosts need [brackets])")
    if not port_text.isdigit() or not port_text.isascii():
        raise ValueError(f"peer address {address!r}: port {port_text!r} is not a decimal number")
    port = int(port_text)
    if not (0 if listener else 1) <= port <= 65535:
        raise ValueError(f"peer address {address!r}: port {port} is outside {0 if listener else 1}..65535")
    return host, port


def format_address(host: str, port: int) -> str:
    """The inverse of parse_address: brackets IPv6 hosts so the port stays unambiguous."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class PeerInfo:
    """What a discovery source knows about one peer; unverified until its /v1/hello checks out."""

    peer_id: str
    """Hex Ed25519 public key; "" while unknown (a `--peer` address before its first hello)."""
    address: str
    """"host:port" where its HTTP server listens."""
    swarm: str = ""
    """The swarm it announces; "" when the source cannot tell."""
    fingerprint: str = ""
    """Its model fingerprint; "" when the source cannot tell."""
    source: str = "static"
    """One of SOURCES."""

    def __post_init__(self) -> None:
        if self.peer_id and not is_peer_id(self.peer_id):
            raise ValueError(
                f"peer_id must be {PEER_ID_HEX_LEN} lowercase hex characters or empty, got {self.peer_id!r}"
            )
        parse_address(self.address)
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")


@runtime_checkable
class Discovery(Protocol):
    """A source of peer suggestions, started and stopped with the peer's event loop.

    Implementations take `on_found` / `on_lost` callbacks at construction (see the module
    docstring for the rules they follow) and report nothing before `async_start` or after
    `async_stop`. `async_stop` is idempotent and leaves no task or thread behind.
    """

    async def async_start(self) -> None: ...

    async def async_stop(self) -> None: ...


def safe_call(callback: Callable[[PeerInfo], None], info: PeerInfo, what: str) -> None:
    """Run a consumer callback, logging instead of propagating what it raises."""
    try:
        callback(info)
    except Exception:  # noqa: BLE001 - a consumer bug must not kill discovery
        log.exception("discovery %s callback failed for %s", what, info.address)


class StaticDiscovery:
    """The `--peer HOST:PORT` list: each address is reported once, at start.

    Peer ids are unknown until the first /v1/hello, so they are reported as "". These are
    the bootstrap peers the neighbour table never drops for space. Nothing is ever
    reported lost: a dead bootstrap address is the table's business, not this source's.
    """

    def __init__(self, addresses: Iterable[str], on_found: OnFound, on_lost: OnLost | None = None) -> None:
        if isinstance(addresses, str):
            raise ValueError(f"addresses must be a list of 'HOST:PORT' strings, not one string {addresses!r}")
        addresses = list(addresses)
        for address in addresses:
            parse_address(address)
        self.addresses: list[str] = list(dict.fromkeys(addresses))  # dedupe, keep order
        self._on_found = on_found
        self._started = False

    async def async_start(self) -> None:
        if self._started:
            raise RuntimeError("StaticDiscovery already started")
        self._started = True
        for address in self.addresses:
            safe_call(self._on_found, PeerInfo(peer_id="", address=address, source="static"), "found")

    async def async_stop(self) -> None:
        self._started = False
