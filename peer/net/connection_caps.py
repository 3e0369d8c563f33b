"""How many connections the server holds open: per remote address, in all, and a reserve.

One global cap alone let one address take every slot: 128 idle sockets from it, reopened as
they closed, kept the status page, `gossip-tts status` and newcomers out while pooled peers went
on. So each address holds at most `max_connections_per_address`, all together at most
`max_connections`, and past that `reserved_connections` more go only to addresses that hold
none yet: an operator looking from a fresh address, or a newcomer, still gets in however many
addresses fill the rest. A connection is counted from `connection_made`, when its address is
known, to `connection_lost`; one over the caps is closed at once (`connections_refused_total`).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from peer.metrics import Metrics
from peer.net.config import NetConfig


class ConnectionCaps:
    """Open connections by address; `admit` says whether one more from an address may be held."""

    def __init__(self, max_connections: int, per_address: int, reserved: int) -> None:
        self.max_connections, self.per_address, self.reserved = max_connections, per_address, reserved
        self.open: dict[str, int] = {}
        """Connections held per address; an address with none has no entry."""
        self.total = 0

    def admit(self, address: str) -> bool:
        """Count one more connection from `address` if the caps allow it."""
        held = self.open.get(address, 0)
        room = self.max_connections + (self.reserved if held == 0 else 0)
        if held >= self.per_address or self.total >= room:
            return False
        self.open[address], self.total = held + 1, self.total + 1
        return True

    def release(self, address: str) -> None:
        """A connection `admit` counted has closed."""
        left = self.open.get(address, 0) - 1
        if left > 0:
            self.open[address] = left
        else:
            self.open.pop(address, None)
        self.total -= 1


class CappedSite(web.TCPSite):
    """A TCP site whose connections are held within `ConnectionCaps`; idle ones are closed by the
    server's keep-alive timeout, so a full table empties by itself."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *, cfg: NetConfig, metrics: Metrics) -> None:
        super().__init__(runner, host, port)
        self.caps = ConnectionCaps(cfg.max_connections, cfg.max_connections_per_address, cfg.reserved_connections)
        self.metrics = metrics

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        return _Counted(self, server)

    def admit(self, address: str) -> bool:
        if self.caps.admit(address):
            return True
        self.metrics.inc("connections_refused_total")
        return False

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        self._server = await asyncio.get_running_loop().create_server(self._protocol, self._host, self._port)
        self._bound_port = self._server.sockets[0].getsockname()[1]


class _Counted(asyncio.Protocol):
    """One connection: admitted by its address once that is known, then served by aiohttp's own
    protocol, to which every event is handed on; closed at once if the caps are full."""

    def __init__(self, site: CappedSite, server: web.Server) -> None:
        self._site, self._server = site, server
        self._inner: asyncio.Protocol | None = None
        self._address = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._site.admit(self._address):
            transport.abort()
            return
        self._inner = self._server()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._inner is not None:
            self._site.caps.release(self._address)
            self._inner.connection_lost(exc)
