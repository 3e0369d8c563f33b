"""The asyncio side of a real peer: HTTP server, discovery, exchanges, peer exchange, eviction.

Runs on its own event loop thread. The training thread only ever calls `want_exchange()`
(thread-safe); everything else happens here, with CPU-heavy frame work sent to the
default executor so the loop never stalls.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket
import time
from typing import Callable

import aiohttp
import torch
from aiohttp import web

from peer.discovery import PeerInfo, StaticDiscovery, format_address, parse_address
from peer.gossip.node import GossipNode
from peer.http_app import build_app
from peer.metrics import Metrics
from peer.neighbours import NeighbourConfig, NeighbourTable
from peer.net_config import NetConfig
from protocol import FrameHeader, FrameKind, FrameRefused, decode_frame, encode_frame

log = logging.getLogger(__name__)


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


MAX_IN_FLIGHT = 2


class Network:
    def __init__(self, node: GossipNode, cfg: NetConfig, metrics: Metrics, emit: Callable[[str], None]) -> None:
        self.node, self.cfg, self.metrics, self.emit = node, cfg, metrics, emit
        self.table = NeighbourTable(NeighbourConfig())
        self.rng = random.Random(cfg.seed)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._discoveries: list = []
        self._tasks: set[asyncio.Task] = set()
        self._wake: asyncio.Event | None = None
        self._pending_publish: tuple[torch.Tensor, int] | None = None
        self._in_flight: set[str] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.address = ""

    # ------------------------------------------------------------------ lifecycle
    async def async_start(self) -> str:
        self.loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        host, port = parse_address(self.cfg.listen, listener=True)
        app = build_app(self.node, self.metrics, self._hello_bytes, self._on_inbound)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        advertise = self.cfg.advertise_host or (lan_ip() if host in ("0.0.0.0", "") else host)
        self.address = format_address(advertise, bound_port)
        self.node.listen = self.address
        self.table = NeighbourTable(NeighbourConfig(self_peer_id=self.node.peer_id, self_addresses=(self.address,)))
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.cfg.request_timeout_s, sock_connect=min(5.0, self.cfg.request_timeout_s))
        )
        self._discoveries.append(StaticDiscovery(self.cfg.peers, on_found=self._on_found))
        if self.cfg.mdns:
            from peer.mdns import MdnsConfig, MdnsDiscovery

            self._discoveries.append(
                MdnsDiscovery(
                    MdnsConfig(
                        peer_id=self.node.peer_id, swarm=self.node.cfg.swarm, fingerprint=self.node.fingerprint,
                        port=bound_port, interfaces=self.cfg.mdns_interfaces,
                        advertise_ips=[advertise] if _is_ipv4(advertise) and advertise != "0.0.0.0" else None,
                    ),
                    on_found=self._on_found, on_lost=self._on_lost,
                )
            )
        for d in self._discoveries:
            await d.async_start()
        for coro in (self._exchange_worker(), self._hello_loop(), self._evict_loop()):
            self._spawn(coro)
        return self.address

    async def async_stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for d in self._discoveries:
            await d.async_stop()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---------------------------------------------------------- called from training
    def want_exchange(self, x: torch.Tensor | None = None, step: int = 0) -> None:
        """Thread-safe: publish `x` (if given) and run one exchange with a random neighbour.

        Compressing and signing happen on an executor thread, not the training thread. If
        publishes pile up behind a slow exchange only the newest is kept: C(x_new − x̂)
        already carries everything the older ones would have.
        """
        if x is not None:
            self._pending_publish = (x, step)
        if self.loop is not None and self._wake is not None:
            self.loop.call_soon_threadsafe(self._wake.set)

    # ------------------------------------------------------------------ discovery
    def _on_found(self, info: PeerInfo) -> None:
        if info.address == self.address or info.peer_id == self.node.peer_id:
            return
        if self.table.add(info, time.monotonic()):
            self.emit(f"found peer {info.address} via {info.source}")

    def _on_lost(self, info: PeerInfo) -> None:
        pass  # mDNS goodbyes are hints; failure detection decides (a lost LAN peer may still answer)

    def _on_inbound(self, listen: str, sender: bytes) -> None:
        """A peer exchanged with us: it is alive, and it tells us where it listens."""
        if not listen:
            return
        try:
            info = PeerInfo(peer_id=sender.hex(), address=listen, source="exchange")
        except ValueError:
            return
        self._on_found(info)
        self.table.mark_success(listen, time.monotonic(), peer_id=sender.hex())

    # -------------------------------------------------------------------- workers
    async def _exchange_worker(self) -> None:
        """Publish, then exchange with a random neighbour not already being talked to.

        Up to MAX_IN_FLIGHT exchanges run at once, so one neighbour that stopped answering
        (its requests wait for a timeout) does not silence this peer.
        """
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending_publish = self._pending_publish, None
            if pending is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._publish, *pending)
            if len(self._in_flight) < MAX_IN_FLIGHT:
                chosen = self.table.choose(self.rng, k=1, exclude=tuple(self._in_flight))
                if chosen:
                    self._spawn(self._tracked_exchange(chosen[0]))
            self.metrics.set("neighbours_live", len(self.table.live()), help="live neighbours in the table")

    async def _tracked_exchange(self, info: PeerInfo) -> None:
        self._in_flight.add(info.address)
        try:
            await self.exchange_with(info)
        finally:
            self._in_flight.discard(info.address)

    def _publish(self, x: torch.Tensor, step: int) -> None:
        try:
            self.node.publish(x, step)
        except ValueError as exc:  # e.g. non-finite parameters: nothing sane to publish
            self.metrics.inc("publish_failures_total", help="updates that could not be published")
            log.error("could not publish an update at step %d: %s", step, exc)
            return
        self.metrics.set(
            "consensus_distance", self.node.consensus_distance(x),
            help="RMS distance of our parameters to the mean of ours and the neighbour copies we hold",
        )

    async def exchange_with(self, info: PeerInfo) -> bool:
        loop = asyncio.get_running_loop()
        key = bytes.fromhex(info.peer_id) if info.peer_id else None
        t0 = time.monotonic()
        try:
            body = await loop.run_in_executor(None, self.node.build_request, key)
            assert self._session is not None
            async with self._session.post(f"http://{info.address}/v1/exchange", data=body) as resp:
                reply = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {reply[:200]!r}")
            result = await loop.run_in_executor(None, self.node.handle_response, reply)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError, ValueError, FrameRefused) as exc:
            self.table.mark_failure(info.address, time.monotonic())
            self.metrics.inc("exchange_failures_total", help="exchanges that failed or timed out")
            log.info("exchange with %s failed: %s", info.address, exc)
            return False
        self.table.mark_success(info.address, time.monotonic(), peer_id=result.sender.hex(), rtt=time.monotonic() - t0)
        return True

    async def _hello_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.hello_every_s * (0.5 + self.rng.random()))
            chosen = self.table.choose(self.rng, k=1)
            if chosen:
                await self.hello(chosen[0].address)

    async def hello(self, address: str) -> dict | None:
        """GET /v1/hello: verify its signature, learn its id, step and the peers it knows."""
        assert self._session is not None
        try:
            async with self._session.get(f"http://{address}/v1/hello") as resp:
                data = await resp.read()
            frame = decode_frame(data, self.node.policy, now=self.node.clock())
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, FrameRefused) as exc:
            self.table.mark_failure(address, time.monotonic())
            log.info("hello to %s failed: %s", address, exc)
            return None
        h = frame.header
        self.table.mark_success(address, time.monotonic(), peer_id=h.sender.hex())
        for entry in h.extra.get("peers", [])[:64]:
            try:
                self._on_found(PeerInfo(peer_id=entry.get("id", ""), address=entry["address"], source="exchange"))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        return {"peer_id": h.sender.hex(), "step": h.step, "listen": h.extra.get("listen", "")}

    def _hello_bytes(self) -> bytes:
        sample = self.table.sample_for_exchange(self.rng, 16)
        peers = [{"id": p.peer_id, "address": p.address} for p in sample]
        node = self.node
        header = FrameHeader(
            swarm=node.cfg.swarm, fingerprint=node.fingerprint, sender=node.identity.public_key,
            kind=FrameKind.HELLO, seq=node.next_control_seq(), step=node.step, timestamp=node.clock(),
            codec="identity", tensors=(), extra={"listen": self.address, "peers": peers},
        )
        return encode_frame(node.identity, header, {}, node.limits)

    async def _evict_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for info in self.table.evict_dead(time.monotonic()):
                self.emit(f"evicted peer {info.address} (unreachable)")
                self.metrics.inc("evictions_total", help="neighbours dropped after failing")
                if info.peer_id:
                    self.node.forget(bytes.fromhex(info.peer_id))
            self.metrics.set("neighbours_live", len(self.table.live()))

    async def fetch_state(self, address: str) -> bytes:
        assert self._session is not None
        async with self._session.get(f"http://{address}/v1/state") as resp:
            if resp.status != 200:
                raise RuntimeError(f"GET /v1/state from {address}: HTTP {resp.status}")
            return await resp.read()
