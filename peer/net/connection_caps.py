"""How many connections the server holds open: per remote address, in all, and a reserve.

An address here is a budget key (`peer.core.budget_key`): an IPv4 address, or an IPv6 /64,
which one host commonly holds whole. An IPv6 block (`NetConfig.ipv6_block_prefix`, a /48: one
site's allocation, 65,536 /64s) holds at most `ipv6_block_share` /64s' connections together, or
one allocation would fill every slot and the reserve from fresh /64s.

One global cap alone let one address take every slot: 128 idle sockets from it, reopened as
they closed, kept the status page, `gossip-tts status` and newcomers out while pooled peers went
on. So each address holds at most `max_connections_per_address`, all together at most
`max_connections`, and past that `reserved_connections` more go only to addresses that hold
none yet: an operator looking from a fresh address, or a newcomer, still gets in however many
addresses fill the rest. A connection is counted from `connection_made`, when its address is
known, to `connection_lost`; one over the caps is closed at once (`connections_refused_total`).
So is one from an address benched for being refused too often (`peer.net.refusal_bench`), and a
connection it holds at its next bytes (`connections_benched_total`), before aiohttp parses them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import struct

from aiohttp import web

from peer.core.budget_key import NO_BLOCKS, Blocks, budget_key
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.http_guard import count_down
from peer.net.refusal_bench import RefusalBench

log = logging.getLogger(__name__)
ACCEPT_BATCH = 64
"""Connections accepted per readiness of a listening socket before the loop runs anything else."""
ACCEPT_RETRY_S = 1.0
"""How long accepting pauses when it fails (out of file descriptors), as asyncio's own does."""


class ConnectionCaps:
    """Open connections by address; `admit` says whether one more from an address may be held."""

    def __init__(self, max_connections: int, per_address: int, reserved: int, blocks: Blocks = NO_BLOCKS) -> None:
        """`blocks`: IPv6 blocks that hold at most `blocks.share` times `per_address` together."""
        self.max_connections, self.per_address, self.reserved = max_connections, per_address, reserved
        self.blocks = blocks
        self.open: dict[str, int] = {}
        """Connections held per address; an address with none has no entry."""
        self.open_blocks: dict[str, int] = {}
        """Connections held per IPv6 block; a block with none has no entry."""
        self.total = 0

    def admit(self, address: str) -> bool:
        """Count one more connection from `address` if the caps allow it. The reserve is for an address
        that holds none, within its block's cap, so one block takes it only up to that cap."""
        held = self.open.get(address, 0)
        room = self.max_connections + (self.reserved if held == 0 else 0)
        if held >= self.per_address or self.total >= room:
            return False
        block = self.blocks.of(address)
        if block is not None:
            in_block = self.open_blocks.get(block, 0)
            if in_block >= self.per_address * self.blocks.share:
                return False
            self.open_blocks[block] = in_block + 1
        self.open[address], self.total = held + 1, self.total + 1
        return True

    def release(self, address: str) -> None:
        """A connection `admit` counted has closed."""
        count_down(self.open, address)
        block = self.blocks.of(address)
        if block is not None:
            count_down(self.open_blocks, block)
        self.total -= 1


class CappedSite(web.TCPSite):
    """A TCP site whose connections are held within `ConnectionCaps`; idle ones are closed by the
    server's keep-alive timeout, so a full table empties by itself."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *, cfg: NetConfig, metrics: Metrics,
                 bench: RefusalBench | None = None) -> None:
        super().__init__(runner, host, port)
        self.caps = ConnectionCaps(cfg.max_connections, cfg.max_connections_per_address, cfg.reserved_connections,
                                   cfg.blocks())
        self.metrics = metrics
        self.bench = bench if bench is not None else RefusalBench(math.inf, 1)
        self._listening: list[socket.socket] = []
        self._serving: set[asyncio.Task[None]] = set()

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        return _Counted(self, server)

    def admit(self, address: str) -> bool:
        if self.benched(address):
            return False
        if self.caps.admit(address):
            return True
        self.metrics.inc("connections_refused_total")
        return False

    def benched(self, address: str) -> bool:
        """Whether `address` is benched (counted): its connections are closed unread."""
        if not self.bench.benched(address):
            return False
        self.metrics.inc("connections_benched_total")
        return True

    async def start(self) -> None:
        """Bind as aiohttp does, but accept here: a benched address's connection is reset as it is
        accepted, before asyncio makes a transport, a task and a protocol for it."""
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, self._host, self._port, backlog=self._backlog,
                                                start_serving=False)
        self._bound_port = self._server.sockets[0].getsockname()[1]
        for bound in self._server.sockets:  # our own handle on each listening socket (closed in stop)
            sock = socket.socket(fileno=os.dup(bound.fileno()))
            sock.setblocking(False)
            sock.listen(self._backlog)  # asyncio listens only once it serves, which it does not here
            self._listening.append(sock)
            loop.add_reader(sock.fileno(), self._accept, loop, sock)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._listening:
            loop.remove_reader(sock.fileno())
            sock.close()
        self._listening.clear()
        await super().stop()

    def _accept(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, peer = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors: the kernel holds the rest until we retry
                log.warning("cannot accept connections (%s); retrying in %g s", exc, ACCEPT_RETRY_S)
                self._pause(loop, sock, ACCEPT_RETRY_S)
                return
            if self.benched(budget_key(str(peer[0]))):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset, no TIME_WAIT
                conn.close()
                if (pause := self.bench.turned_away()) > 0:
                    self.metrics.inc("accept_pauses_total")
                    self._pause(loop, sock, pause)
                    return
                continue
            conn.setblocking(False)
            task = loop.create_task(self._serve(loop, conn))
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    def _pause(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, seconds: float) -> None:
        loop.remove_reader(sock.fileno())
        loop.call_later(seconds, self._resume, loop, sock)

    def _resume(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        if sock in self._listening:
            loop.add_reader(sock.fileno(), self._accept, loop, sock)

    async def _serve(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
        try:
            await loop.connect_accepted_socket(self._protocol, conn)
        except OSError:  # gone before it was served
            conn.close()


class _Counted(asyncio.Protocol):
    """One connection: admitted by its address once that is known, then served by aiohttp's own
    protocol, to which every event is handed on; closed at once if the caps are full."""

    def __init__(self, site: CappedSite, server: web.Server) -> None:
        self._site, self._server = site, server
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._address = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._address = budget_key(str(peer[0])) if isinstance(peer, tuple) and peer else "?"
        if not self._site.admit(self._address):
            transport.abort()
            return
        self._transport = transport
        self._inner = self._server()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._site.benched(self._address):  # a kept-alive connection of a benched address
            assert self._transport is not None
            self._transport.abort()
            return
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
