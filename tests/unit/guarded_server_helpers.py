"""A guarded, benched and capped server, and one HTTP request to it over a plain socket from a
chosen source address: for tests of what a server does before HTTP is parsed (connections closed
as they are made, or at their first bytes)."""

from __future__ import annotations

import socket

from aiohttp import web

from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.connection_caps import CappedSite
from peer.net.http_guard import TICKETED_KEY, RequestGuard
from peer.net.refusal_bench import RefusalBench


def ask(host: str, port: int, source: str, line: bytes, body: bytes = b"") -> int:
    """One request (`line`, e.g. b"GET /metrics", then `body`) from `source` to `host`: its answer's
    status, or 0 when the connection was closed unanswered."""
    try:
        with socket.create_connection((host, port), timeout=5, source_address=(source, 0)) as s:
            s.sendall(line + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            answer = s.makefile("rb").readline()
        return int(answer.split()[1]) if answer else 0
    except OSError:
        return 0


async def refusing_site(cfg: NetConfig, host: str, metrics: Metrics) -> tuple[web.AppRunner, CappedSite]:
    """Serve, on `host` at a free port, POST /v1/exchange (refused, 400, as a first contact the node
    could not open) and GET /metrics behind the guard, the bench and the capped site `cfg` describes."""

    async def exchange(request: web.Request) -> web.Response:
        request[TICKETED_KEY] = False  # what the node says of a first contact it could not open
        return web.Response(status=400, text="refused")

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    bench = RefusalBench.of(cfg)
    app = web.Application(middlewares=[RequestGuard(cfg, metrics, max_body_bytes=1 << 20, bench=bench).middleware()])
    app.router.add_post("/v1/exchange", exchange)
    app.router.add_get("/metrics", page)
    runner = web.AppRunner(app, lingering_time=0)
    await runner.setup()
    site = CappedSite(runner, host, 0, cfg=cfg, metrics=metrics, bench=bench)
    await site.start()
    return runner, site
