"""What the server refuses before a handler runs: bounded work per remote address.

A peer accepts connections from anyone who can reach it. Without these limits, 60
connections that each send all but the last byte of a large body pin 60 bodies in memory,
a compressed body expands before any limit is looked at, and a stranger can make us sign
and stream full snapshots in a loop. Refusals are counted by reason
(`http_refused_total{reason=...}`).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Awaitable, Callable

from aiohttp import web

from peer.metrics import Metrics
from peer.net_config import NetConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestGuard:
    """An aiohttp middleware: per-address concurrency, no compressed bodies, a body deadline,
    a rate for full-state downloads."""

    def __init__(self, cfg: NetConfig, metrics: Metrics) -> None:
        self.cfg, self.metrics = cfg, metrics
        self._open: dict[str, int] = defaultdict(int)
        self._last_state: dict[str, float] = {}

    def _refuse(self, status: int, reason: str, text: str) -> web.Response:
        self.metrics.inc("http_refused_total", help="requests refused before reaching a handler", reason=reason)
        return web.json_response({"refused": reason, "detail": text}, status=status)

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        """The aiohttp middleware performing these checks."""

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self.check(request, handler)

        return guard

    async def check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        remote = request.remote or "?"
        if request.headers.get("Content-Encoding", "identity").lower() != "identity":
            return self._refuse(415, "compressed_body", "compressed request bodies are not accepted")
        if self._open[remote] >= self.cfg.max_requests_per_address:
            return self._refuse(429, "too_many_open", f"at most {self.cfg.max_requests_per_address} open requests per address")
        if request.path == "/v1/state":
            now = time.monotonic()
            if now - self._last_state.get(remote, -1e18) < self.cfg.state_every_s:
                return self._refuse(429, "state_rate", f"one /v1/state per {self.cfg.state_every_s:g} s per address")
            self._last_state[remote] = now
            if len(self._last_state) > 4096:  # bounded: forget the oldest
                for key in sorted(self._last_state, key=self._last_state.get)[:1024]:
                    del self._last_state[key]
        self._open[remote] += 1
        try:
            if request.body_exists:
                try:
                    await asyncio.wait_for(request.read(), self.cfg.body_read_timeout_s)  # cached for the handler
                except asyncio.TimeoutError:
                    return self._refuse(408, "slow_body", f"body not received within {self.cfg.body_read_timeout_s:g} s")
            return await handler(request)
        finally:
            self._open[remote] -= 1
            if not self._open[remote]:
                del self._open[remote]
