"""Peer addresses and what discovery reports about a peer: pure parsing and validation.

Shared by the neighbour table (in the core) and the discovery sources (in the driver), so
an address is parsed the same way wherever it enters.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

PEER_ID_HEX_LEN = 64
"""An Ed25519 public key is 32 bytes: 64 lowercase hex characters."""

SOURCES = ("mdns", "static", "exchange")
"""Where a PeerInfo came from: a LAN announcement, a `--peer` flag, another peer's hello."""

MAX_LISTEN_CHARS = 256
"""Longest listen address a peer may claim (a DNS name is at most 253 characters)."""

_HEX_ID = re.compile(r"[0-9a-f]{64}")
_HOST = re.compile(r"[A-Za-z0-9._-]+")



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


def valid_listen(text: object) -> bool:
    """Whether a peer's claimed listen address is "" (none) or a HOST:PORT `parse_address` takes,
    of at most MAX_LISTEN_CHARS: it is dialled, and shown to a person, so nothing else is stored."""
    if text == "":
        return True
    if not isinstance(text, str) or len(text) > MAX_LISTEN_CHARS:
        return False
    try:
        parse_address(text)
    except ValueError:
        return False
    return True


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
