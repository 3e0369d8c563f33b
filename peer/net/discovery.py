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

import logging
from typing import Callable, Iterable, Protocol, runtime_checkable

from peer.core.addresses import PEER_ID_HEX_LEN, SOURCES, PeerInfo, format_address, is_peer_id, parse_address

log = logging.getLogger(__name__)

OnFound = Callable[["PeerInfo"], None]
OnLost = Callable[["PeerInfo"], None]


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
