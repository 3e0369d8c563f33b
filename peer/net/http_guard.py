"""What the server refuses before a handler runs: bounded work and memory, per address and in all.

A peer accepts connections from anyone who can reach it, and one attacker may speak from
many addresses (any 127.x.y.z is the same machine; an IPv6 /64 is 2^64 addresses, so every
per-address limit here keys an IPv6 address by its /64: `remote_key`). Without
these limits, 60 connections that each send all but the last byte of a large body pin 60
bodies in memory, a compressed body expands before any limit is looked at, idle
connections pile up, and a stranger can make us sign and stream full snapshots in a loop.

Limits per address (`max_requests_per_address`, `state_every_s`, and a token bucket for
exchanges that spend no ticket of ours: `stranger_exchanges_per_s`) keep one address from
taking the peer's whole share; limits in all (`max_connections`, the body budget, the node
worker's queue in `peer.net.node_worker`) hold however many addresses there are. Each of these
per-address limits is also kept per IPv6 block (`NetConfig.ipv6_block_prefix`, a /48), at
`ipv6_block_share` times a /64's: one allocation is 65,536 /64s, and a flood spread over them
gets that many addresses' budgets otherwise (`peer.core.budget_key.Blocks`). Refusals are
counted by reason (`http_refused_total{reason=...}`), and every answer by status
(`http_responses_total{code=...}`), malformed HTTP included.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any, Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from peer.core.budget_key import budget_key
from peer.core.ingest import HEAD_BYTES, bundle_sender, exchange_work
from peer.core.token_bucket import AddressBuckets, BlockBuckets
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.refusal_bench import RefusalBench
from protocol import Limits

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BODY_KEY: web.RequestKey[bytearray] = web.RequestKey("body", bytearray)
"""The request body, read (and counted against the budget) by the guard before the handler runs."""
TICKETED_KEY: web.RequestKey[bool] = web.RequestKey("ticketed", bool)
"""Set by the exchange handler once the node has read the request: whether it spent a ticket of
ours. False (a first contact, a refused frame) costs the sender's address a stranger token."""
BLAMED = frozenset({400, 408, 413, 415, 429})
"""Answers that refuse a request for what it is or how often its address asks (not 503: our own
state, a busy worker or the body budget of all addresses together)."""
MAX_RETRY_AFTER_S = 60
"""The longest `Retry-After` sent: a debt deeper than this is still paid, asked again later."""
MAX_GUARDED_ADDRESSES = 4096
"""Addresses whose /v1/state and stranger buckets are remembered; the least recent goes first
(and starts full again)."""


class RequestGuard:
    """An aiohttp middleware: per-address concurrency, no compressed bodies, a body deadline and
    size, a byte budget for all bodies held at once, a rate for full-state downloads and one for
    exchanges that spend no ticket of ours."""

    def __init__(self, cfg: NetConfig, metrics: Metrics, max_body_bytes: int,
                 clock: Callable[[], float] = time.monotonic, *, model_bytes: int | None = None,
                 min_body_rate: float = math.inf, bench: RefusalBench | None = None) -> None:
        """`min_body_rate`: bytes per second a body must keep up past `NetConfig.body_read_timeout_s`
        (`SessionConfig.min_transfer_rate`) over every stretch of its transfer: a pushed snapshot is the
        model's size, so the deadline grows with what arrives, by at most `body_read_timeout_s` ahead of
        now; inf keeps the fixed deadline. `bench` is told of every answer
        that blames the request (`BLAMED`), so that an address refused too often is turned away
        before HTTP is parsed (`peer.net.refusal_bench`)."""
        self.cfg, self.metrics, self.clock = cfg, metrics, clock
        self.bench = bench
        self.min_body_rate = min_body_rate
        self.max_body_bytes = max_body_bytes
        """The largest body accepted: a bundle larger than the frame limit is refused anyway."""
        self.model_bytes = model_bytes if model_bytes is not None else max_body_bytes // 2
        """Bytes of an fp32 copy of the model: what a frame's bytes are weighed against (`exchange_work`);
        by default the snapshot the body limit is sized to."""
        self._bundles = Limits(max_frame_bytes=max_body_bytes, max_decompressed_bytes=max_body_bytes)
        self.body_budget = int(cfg.body_budget_frames * max_body_bytes)
        """Body bytes held at once by all requests together (received, not merely declared)."""
        self.held = 0
        self._open: dict[str, int] = {}
        """Requests open per address, and per IPv6 block; one with none has no entry (refusals add none)."""
        self.blocks = blocks = cfg.blocks()
        state_rate = 1.0 / cfg.state_every_s if cfg.state_every_s > 0 else math.inf
        self._states = BlockBuckets(state_rate, 1, MAX_GUARDED_ADDRESSES, blocks)
        self._strangers = BlockBuckets(cfg.stranger_exchanges_per_s, cfg.stranger_exchange_burst, MAX_GUARDED_ADDRESSES,
                                       blocks)
        self._address_work = BlockBuckets(cfg.address_work_per_s, cfg.address_work_burst, MAX_GUARDED_ADDRESSES, blocks)
        self._key_work = AddressBuckets(cfg.key_work_per_s, cfg.key_work_burst, MAX_GUARDED_ADDRESSES)

    def _refuse(self, status: int, reason: str, text: str, retry_after_s: float | None = None) -> web.Response:
        """`retry_after_s`: when a 429's budget has room again, sent as `Retry-After` (whole seconds,
        at least 1) so that an honest peer waits instead of collecting refusals (its driver rests
        that partner: `Session.exchange_done(busy_s=...)`) and is never benched for them."""
        self.metrics.inc("http_refused_total", reason=reason)
        headers = None
        if retry_after_s is not None:
            headers = {"Retry-After": str(max(1, min(MAX_RETRY_AFTER_S, math.ceil(retry_after_s))))}
        return web.json_response({"refused": reason, "detail": text}, status=status, headers=headers)

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        """The aiohttp middleware performing these checks."""

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self.check(request, handler)

        return guard

    async def check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        remote = remote_key(request)
        response = await self._check(request, handler, remote)
        if self.bench is not None and response.status in BLAMED:
            self.bench.refused(remote)
        return response

    async def _check(self, request: web.Request, handler: Handler, remote: str) -> web.StreamResponse:
        if request.headers.get("Content-Encoding", "identity").lower() != "identity":
            return self._refuse(415, "compressed_body", "compressed request bodies are not accepted")
        declared = request.content_length
        if declared is not None and declared > self.max_body_bytes:
            return self._refuse(413, "too_large", f"bodies are at most {self.max_body_bytes} bytes")
        block = self.blocks.of(remote)
        if self._open.get(remote, 0) >= self.cfg.max_requests_per_address or (
                block is not None and self._open.get(block, 0) >= self.cfg.max_requests_per_address * self.blocks.share):
            return self._refuse(429, "too_many_open", f"at most {self.cfg.max_requests_per_address} open requests per "
                                f"address, {self.cfg.max_requests_per_address * self.blocks.share} per IPv6 "
                                f"/{self.blocks.prefix}", 1.0)
        if request.path == "/v1/state" and request.method in ("GET", "HEAD") and not self._states.take(remote, self.clock()):
            return self._refuse(429, "state_rate", f"one /v1/state per {self.cfg.state_every_s:g} s per address",
                                self._states.wait(remote, self.clock()))
        exchange = request.path == "/v1/exchange" and request.method == "POST"
        if exchange and not self._strangers.has(remote, self.clock()):
            return self._refuse(429, "stranger_rate", f"at most {self.cfg.stranger_exchanges_per_s:g} exchanges a second "
                                "per address that spend no ticket of ours", self._strangers.wait(remote, self.clock()))
        if exchange and not self._address_work.has(remote, self.clock()):
            return self._refuse(429, "address_work", f"exchanges from one address may cost at most "
                                f"{self.cfg.address_work_per_s:g} applied updates' work a second",
                                self._address_work.wait(remote, self.clock()))
        opened = [remote] + ([block] if block is not None else [])  # a /64 and a block never share a key
        for key in opened:
            self._open[key] = self._open.get(key, 0) + 1
        held = [0]
        try:
            if request.body_exists:
                refusal = await self._read_body(request, held, self._key_refusal if exchange else None)
                if refusal is not None:
                    return refusal
            charged = self._charge(remote, request.get(BODY_KEY)) if exchange else None
            response = await handler(request)
            if charged is not None and response.status == 200:  # its control frame verified: the key signed it
                self._key_work.charge(charged[0], self.clock(), charged[1])
            if exchange and request.get(TICKETED_KEY) is False:
                self._strangers.take(remote, self.clock())
            return response
        finally:
            self.held -= held[0]
            for key in opened:
                count_down(self._open, key)

    def _key_refusal(self, head: bytes) -> web.Response | None:
        """A 429 where the key a body's first bytes name (`peer.core.ingest.bundle_sender`) is out of
        its work budget: refused before the rest of its body is read."""
        key = bundle_sender(head).hex()
        if self._key_work.has(key, self.clock()):
            return None
        return self._refuse(429, "key_work", f"exchanges of one key may cost at most "
                            f"{self.cfg.key_work_per_s:g} applied updates' work a second", self._key_work.wait(key, self.clock()))

    def _charge(self, remote: str, body: bytearray | None) -> tuple[str, float]:
        """An exchange's work (`peer.core.ingest.exchange_work`, ticketed or not), charged to its address
        before the node sees it; (the key it names, the work). The key is unverified here: it is charged
        once the node has verified the control frame it signed (`check`), so naming another's key spends
        no budget of theirs."""
        key, work = exchange_work(body or b"", self.model_bytes, self._bundles)
        self._address_work.charge(remote, self.clock(), work)
        return key.hex(), work

    async def _read_body(self, request: web.Request, held: list[int],
                         head: Callable[[bytes], web.Response | None] | None = None) -> web.Response | None:
        """Read the body into `request[BODY_KEY]`, counting each received byte against the budget
        (`held[0]` is this request's share, given back when the request ends); `head` may refuse it
        from its first `HEAD_BYTES` (or all of a shorter one), the rest unread.

        Read piece by piece as the connection delivered them (`readchunk`; `iter_any` joins whatever
        is buffered into a new copy first) into one buffer, so an honest body the model's size is
        never held twice; a refused one's buffer is emptied whatever stopped it."""
        body = bytearray()

        async def receive() -> web.Response | None:
            nonlocal head
            loop = asyncio.get_running_loop()
            timeout, content = self.cfg.body_read_timeout_s, request.content
            deadline = loop.time() + timeout
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise asyncio.TimeoutError
                chunk, _ = await asyncio.wait_for(content.readchunk(), left)
                # The deadline moves on with every byte received, at the floor rate, but never
                # past `timeout` from now: a sender cannot bank a fast start and then stall (or
                # drip) while what it sent holds the body budget.
                deadline = min(deadline + len(chunk) / self.min_body_rate, loop.time() + timeout)
                if not chunk:
                    if content.at_eof():
                        return head(bytes(body)) if head is not None else None
                    continue  # the end of an HTTP chunk
                if head is not None and len(body) + len(chunk) >= HEAD_BYTES:
                    refusal, head = head(bytes(body) + chunk[:HEAD_BYTES - len(body)]), None
                    if refusal is not None:
                        return refusal
                if len(body) + len(chunk) > self.max_body_bytes:
                    return self._refuse(413, "too_large", f"bodies are at most {self.max_body_bytes} bytes")
                if self.held + len(chunk) > self.body_budget:
                    return self._refuse(503, "body_budget", "too many request bodies in memory; try again later")
                self.held += len(chunk)
                held[0] += len(chunk)
                body.extend(chunk)

        try:
            refusal = await receive()
            if refusal is None:
                request[BODY_KEY] = body
            return refusal
        except asyncio.TimeoutError:
            return self._refuse(408, "slow_body", f"body fell behind {self.min_body_rate:g} bytes/s with "
                                                  f"{self.cfg.body_read_timeout_s:g} s of grace")
        except (ConnectionError, OSError, RuntimeError, RequestPayloadError, HttpProcessingError) as exc:
            # The sender went away mid-body (aiohttp raises RuntimeError("Connection closed.") when
            # the transport is already gone), or broke the chunked framing.
            return self._refuse(400, "body_incomplete", f"body not received whole: {type(exc).__name__}")
        finally:
            # The exception aiohttp raises is kept by the request's reader and holds this frame in
            # a cycle: a refused body's bytes go now, not at the collector's next full pass.
            if request.get(BODY_KEY) is not body:
                body.clear()


def remote_key(request: web.Request) -> str:
    """The key `request`'s address is budgeted under (`peer.core.budget_key`: an IPv6 /64 is one
    address); "?" where the transport names none."""
    return budget_key(request.remote or "?")


def count_down(open_per_address: dict[str, int], remote: str) -> None:
    """One request of `remote` ended: count it down, dropping the entry at zero, so that the
    map holds only addresses with something open however many addresses come and go."""
    left = open_per_address.get(remote, 0) - 1
    if left > 0:
        open_per_address[remote] = left
    else:
        open_per_address.pop(remote, None)


# ---------------------------------------------------------------------------------- the server around it
def response_counter(metrics: Metrics) -> type[AbstractAccessLogger]:
    """An aiohttp access logger that writes no lines and counts every answer by status code,
    including the 400s aiohttp's parser gives malformed requests before any handler runs."""

    class ResponseCounter(AbstractAccessLogger):
        def log(self, request: Any, response: web.StreamResponse, time: float) -> None:
            metrics.inc("http_responses_total", code=str(response.status))

    return ResponseCounter


class QuietBadRequests(logging.LoggerAdapter):
    """aiohttp's server logger, with malformed requests demoted to debug: it logs each one as an
    error with a traceback, so anyone could fill our log. Errors of our own handlers stay errors."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if isinstance(kwargs.get("exc_info"), HttpProcessingError):
            level = logging.DEBUG
        super().log(level, msg, *args, **kwargs)
