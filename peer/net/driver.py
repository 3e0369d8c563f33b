"""The asyncio/aiohttp driver of a real peer: performs what the `Session` decides.

It decides nothing. Events (a step boundary, a discovery, a reply, a timeout, a tick) go
to `peer.core.session.Session`; the actions it returns are performed here through the
handlers of the `peer.core.Driver` contract, with every piece of node work a named job of
the `NodeWorker` thread. It runs on the event-loop thread;
only `notify_boundary` and `verified_addresses` may be called from another thread. Its HTTP
server (`peer.net.http_server`) is started beside it and answers through the driver's
`serve_*` methods and queries. See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import secrets
import socket
import threading
import time
from typing import Any, Callable, Coroutine

import aiohttp
import torch

from peer.core import (
    Action, Adopt, Count, Exchange, FetchState, FetchedStates, Forget, JoinDone, Log, PeerInfo, Publish, SendHello,
    Driver, NeighbourHealth, Session, SessionConfig, format_address, make_hello, parse_address, perform, read_hello,
)
from peer.boundary import PendingPublish
from peer.net.errors import busy_for, describe_failure, describe_status
from peer.net.http_io import BodyTooLarge, read_capped
from peer.net.state_fetch import fetch_state
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.node_worker import NodeWorker
from protocol import FrameRefused

log = logging.getLogger(__name__)
HELLO_MAX_BYTES = 64 * 1024
"""A hello is a few hundred bytes plus at most 64 peer entries: anything larger is refused unread."""
LOG_LEVELS = {"debug": logging.DEBUG, "warning": logging.WARNING, "error": logging.ERROR, "critical": logging.CRITICAL}
"""A `Log` action's level; an info line goes to the operator's stream (`emit`) instead."""
VERIFIED_WAIT_S = 5.0
"""How long `verified_addresses`, asked from another thread, waits for the loop to answer."""


def lan_ip() -> str:
    """This machine's outward-facing IP (no packet is sent: a UDP connect only picks a route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
        return True
    except ValueError:
        return False


class AsyncDriver(Driver):
    """Owns the session, the HTTP client, discovery and the timer."""

    def __init__(self, worker: NodeWorker, session_cfg: SessionConfig, net_cfg: NetConfig, metrics: Metrics,
                 emit: Callable[[str], None], on_adopt: Callable[[torch.Tensor, int], None],
                 probe: Callable[[torch.Tensor], bool] | None = None) -> None:
        self.worker, self.node = worker, worker.node
        self.net_cfg, self.metrics, self.emit, self.on_adopt = net_cfg, metrics, emit, on_adopt
        self.probe = probe
        """Whether an offered state scores better than ours (the trainer's `probe_better`), if it can tell."""
        self.session = Session(session_cfg, peer_id=self.node.peer_id, rng=random.Random(net_cfg.seed))
        self.joined = threading.Event()
        """Set once joining is over (at once when not joining); the training thread waits on it."""
        self.join_error: Exception | None = None
        """Why loading an adopted state failed, if it did: set before `joined`; the runtime then
        stops with it rather than train on parameters that may be part replaced."""
        self.trace: list[Action] | None = None
        """When a list, every dispatched action is appended (tests compare drivers with it)."""
        self.address = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._client: aiohttp.ClientSession | None = None
        self._discoveries: list[Any] = []
        self._tasks: set[asyncio.Task] = set()
        self._fetched = FetchedStates()
        self._adopting: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._timer_due = 0.0

    # ------------------------------------------------------------------ clocks
    @staticmethod
    def mono() -> float:
        """The session's clock."""
        return time.monotonic()

    @staticmethod
    def wall() -> float:
        """The node's clock (frame timestamps are compared across machines)."""
        return time.time()

    # ------------------------------------------------------------------ lifecycle
    async def async_start(self, bound_port: int) -> str:
        """Start the session, client, discovery and timer of a peer whose server listens on
        `bound_port` (`peer.net.http_server.HttpServer.start`); the address we advertise.
        Everything up to the first await runs before the server's first request is handled."""
        self.loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        host, _ = parse_address(self.net_cfg.listen, listener=True)
        advertise = self.net_cfg.advertise_host or (lan_ip() if host in ("0.0.0.0", "") else host)
        self.address = format_address(advertise, bound_port)
        self.node.listen = self.address
        cfg = self.session.cfg
        self._client = aiohttp.ClientSession(
            auto_decompress=False,  # a compressed body could expand past every limit before we look
            timeout=self._timeout(cfg.request_timeout_s),  # hellos; exchanges and states set their own
        )
        if self.net_cfg.mdns:
            from peer.net.mdns import MdnsConfig, MdnsDiscovery

            self._discoveries.append(MdnsDiscovery(
                MdnsConfig(
                    peer_id=self.node.peer_id, swarm=self.node.cfg.swarm, fingerprint=self.node.fingerprint,
                    port=bound_port, interfaces=self.net_cfg.mdns_interfaces,
                    advertise_ips=[advertise] if _is_ipv4(advertise) and advertise != "0.0.0.0" else None,
                ),
                on_found=self.on_found, on_lost=lambda info: None,  # goodbyes are hints; failures decide
            ))
        self.on_start(list(self.net_cfg.peers), step=0)
        if self.session.accepting:
            self.joined.set()
        for d in self._discoveries:
            await d.async_start()
        self._spawn(self._timer())
        return self.address

    async def async_stop(self) -> None:
        """Cancel the session's tasks, stop discovery and the client (the server stops after, on
        its own). An adoption under way finishes first, so the trainer and the node hold our own
        state or the whole adopted one (`GossipPeer._stop_network`)."""
        if self._adopting is not None:
            await asyncio.gather(self._adopting, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for d in self._discoveries:
            await d.async_stop()
        if self._client is not None:
            await self._client.close()

    def _timeout(self, total_s: float) -> aiohttp.ClientTimeout:
        """A request's deadline (a transfer's, which grows with what it may carry), connect included."""
        return aiohttp.ClientTimeout(total=total_s, sock_connect=self.session.cfg.connect_timeout_s)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ events in
    def on_start(self, bootstrap: list[str], step: int) -> None:
        """Our server is up at `self.address`; hello sequence numbers continue from the wall clock."""
        self.dispatch(self.session.start(self.mono(), listen=self.address, bootstrap=bootstrap, step=step,
                                         hello_seq_base=int(self.wall() * 1e6)))

    def notify_boundary(self, step: int, publish_due: bool) -> None:
        """Thread-safe (the training thread calls it): a step ended."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.on_boundary, step, publish_due)

    def on_boundary(self, step: int, publish_due: bool) -> None:
        self.dispatch(self.session.step_boundary(step, publish_due, self.mono()))

    def on_found(self, info: PeerInfo) -> None:
        self.dispatch(self.session.found(info, self.mono()))

    def on_tick(self) -> None:
        self.dispatch(self.session.tick(self.mono()))

    async def _timer(self) -> None:
        """Sleep until the session's next deadline (or an earlier one appears), then tick."""
        assert self._wake is not None
        while True:
            self._timer_due = min(self.session.next_deadline(), self.mono() + 1.0)
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, self._timer_due - self.mono()))
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            self.on_tick()

    # ------------------------------------------------------------------ actions out
    def dispatch(self, actions: list[Action]) -> None:
        for action in actions:
            if self.trace is not None:
                self.trace.append(action)
            self.perform(action)
        if self._wake is not None and self.session.next_deadline() < self._timer_due:
            self._wake.set()  # a deadline moved earlier than the timer's sleep

    def perform(self, action: Action) -> None:
        """Do what one action says (`peer.core.perform`: the contract's handler for it)."""
        perform(self, action)

    # ------------------------------------------------------------------ the Driver contract's handlers
    @property
    def publish_slot(self) -> PendingPublish:
        return self.worker.pending

    def publish(self, a: Publish) -> None:
        self._spawn(self._publish())

    def exchange(self, a: Exchange) -> None:
        self._spawn(self._exchange(a))

    def send_hello(self, a: SendHello) -> None:
        self._spawn(self._hello(a))

    def fetch_state(self, a: FetchState) -> None:
        self._spawn(self._fetch_state(a))

    def adopt(self, a: Adopt) -> None:
        self._adopting = self._spawn(self._adopt(a))

    def join_done(self, a: JoinDone) -> None:
        self._spawn(self._join_done())

    def forget(self, a: Forget) -> None:
        self._spawn(self.worker.forget(bytes.fromhex(a.peer_id)))
        self.metrics.forget(peer=a.peer_id[:16])

    def log(self, a: Log) -> None:
        if a.level == "info":
            self.emit(a.message)
        else:
            log.log(LOG_LEVELS.get(a.level, logging.INFO), a.message)

    def count(self, a: Count) -> None:
        self.metrics.inc(a.name, a.value, **dict(a.labels))

    async def _publish(self) -> None:
        result = await self.worker.publish()
        if result is not None:
            step, error = result
            self.dispatch(self.session.publish_done(step, self.mono(), error))

    async def _exchange(self, a: Exchange) -> None:
        key = bytes.fromhex(a.peer_id) if a.peer_id else None
        t0, cfg, busy_s = self.mono(), self.session.cfg, None
        try:
            body = await self.worker.build_request(key)
            assert self._client is not None
            async with self._client.post(f"http://{a.address}/v1/exchange", data=body,
                                         timeout=self._timeout(cfg.exchange_deadline_s(self.node.snapshot_bytes))) as resp:
                reply = await read_capped(resp, self.node.limits.max_frame_bytes * 2)
                if resp.status != 200:
                    busy_s = busy_for(resp.status, resp.headers.get("Retry-After"))
                    raise RuntimeError(f"HTTP {resp.status}: {reply[:200]!r}")
            result = await self.worker.handle_response(reply)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError, ValueError, FrameRefused,
                BodyTooLarge) as exc:
            if isinstance(exc, FrameRefused):
                self.metrics.inc("frames_refused_total", reason=exc.reason.value)
            self.dispatch(self.session.exchange_done(a.token, self.mono(), error=str(exc) or type(exc).__name__,
                                                     busy_s=busy_s))
            return
        self.metrics.observe("exchange_seconds", self.mono() - t0)
        self.dispatch(self.session.exchange_done(a.token, self.mono(), peer_id=result.sender.hex(),
                                                 rtt=self.mono() - t0, carried=result.news, owed=result.owed,
                                                 step=result.step))

    async def _hello(self, a: SendHello) -> None:
        try:
            assert self._client is not None
            nonce = secrets.token_hex(16)
            async with self._client.get(f"http://{a.address}/v1/hello", params={"nonce": nonce}) as resp:
                data = await read_capped(resp, HELLO_MAX_BYTES)
                if resp.status != 200:
                    raise RuntimeError(describe_status(resp.status))
            hello = read_hello(data, self.node.policy, self.wall(), nonce)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError, FrameRefused, BodyTooLarge) as exc:
            self.dispatch(self.session.hello_done(a.token, self.mono(), error=describe_failure(exc)))
            return
        self.dispatch(self.session.hello_done(a.token, self.mono(), hello=hello))

    async def _fetch_state(self, a: FetchState) -> None:
        try:
            assert self._client is not None
            expected, cfg = self.node.snapshot_bytes, self.session.cfg
            data = await fetch_state(self._client, f"http://{a.address}/v1/state", limit=self.node.limits.max_frame_bytes,
                                     resumes=cfg.state_resumes,  # each request's deadline for the bytes still to come
                                     timeout_for=lambda got: self._timeout(cfg.transfer_deadline_s(expected - got)))
            x, step = await self.worker.read_state(data)
            # Scored off the loop: the training thread is waiting for the join, not using the trainer.
            better = await asyncio.get_running_loop().run_in_executor(None, self.probe, x) if self.probe else None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError, ValueError, FrameRefused,
                BodyTooLarge) as exc:
            self.dispatch(self.session.state_done(a.token, self.mono(), error=str(exc) or type(exc).__name__))
            return
        self.dispatch(self._fetched.judged(a.token, x, self.session.state_done(a.token, self.mono(), step=step,
                                                                              better=better)))

    async def _adopt(self, a: Adopt) -> None:
        x = self._fetched.take(a.token)
        # Off the loop, which goes on answering hellos, /v1/status and mDNS: loading a state can be
        # a copy to the device or a broadcast to every rank (peer/local/group.py). The training thread
        # waits on `joined`: it is not stepping.
        await asyncio.get_running_loop().run_in_executor(None, self.on_adopt, x, a.step)
        await self.worker.adopt(x, a.step)

    async def _join_done(self) -> None:
        try:
            if self._adopting is not None:
                await self._adopting
        except Exception as exc:  # the trainer may hold part of the state: the runtime ends the run
            self.join_error = exc
        finally:
            self._fetched.clear()
        if self.join_error is None:  # the node holds the adopted state: exchanges now carry it
            self.dispatch(self.session.joined(self.mono()))
        self.joined.set()

    # ------------------------------------------------------------------ queries (the HTTP face, the app)
    @property
    def accepting(self) -> bool:
        """Whether inbound exchanges are served (not while joining: our state is about to change)."""
        return self.session.accepting

    @property
    def step(self) -> int:
        """The step the training thread last reported at a boundary."""
        return self.session.step

    def live_peers(self) -> list[PeerInfo]:
        """The neighbour table's peers not judged dead, by address."""
        return self.session.table.live()

    def known_neighbours(self) -> list[NeighbourHealth]:
        """Every live table entry and every static one (kept while dead), by address."""
        table = self.session.table
        addresses = sorted({p.address for p in [*table.live(), *table.static_peers()]})
        return [h for h in map(table.health, addresses) if h is not None]

    def verified_addresses(self) -> list[str]:
        """From any thread but the loop's: the live neighbours that have answered us, read on the
        loop (the session's thread); [] before the start, or while the loop is stopping."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return []

        async def snapshot() -> list[str]:
            return [p.address for p in self.session.table.verified()]

        try:
            return asyncio.run_coroutine_threadsafe(snapshot(), loop).result(VERIFIED_WAIT_S)
        except Exception:  # the loop is stopping
            return []

    # ------------------------------------------------------------------ serving (peer.net.http_app)
    async def serve_exchange(self, body: bytes | bytearray, address: str) -> tuple[bytes, bool]:
        """POST /v1/exchange from `address` (its budget key, an IPv6 /64 for all of that block:
        `peer.core.budget_key`): (the answer, whether it spent a ticket of ours); raises
        FrameRefused (400), ValueError (500) or WorkerBusy (503)."""
        verified = self.session.verified_keys()
        reply, result = await self.worker.for_others(self.net_cfg.max_queued_requests,
                                                     lambda: self.worker.handle_request(body, address, verified))
        self.dispatch(self.session.inbound_exchange(result.listen, result.sender.hex(), self.mono(), carried=result.news))
        return reply, result.accepted

    def serve_hello(self, nonce: str) -> bytes:
        """GET /v1/hello: signed on the loop (a few hundred bytes, no tensors), echoing the asker's nonce."""
        s = self.session
        return make_hello(self.node.identity, swarm=self.node.cfg.swarm, fingerprint=self.node.fingerprint,
                          seq=s.next_hello_seq(), step=s.step, now=self.wall(), listen=self.address,
                          peers=s.hello_sample(), limits=self.node.limits, nonce=nonce)

    async def serve_state(self) -> bytes:
        """GET /v1/state: one signed snapshot per publish, built on the worker and cached (WorkerBusy: 503)."""
        return await self.worker.for_others(self.net_cfg.max_queued_requests, self.worker.state_frame)
