"""The guard reads a request body piece by piece into one buffer (peer/net/http_guard.py): a body
that arrives in many pieces, chunked or not, reaches the handler byte for byte, and one whose
sender goes away part way leaves nothing of itself behind, even where the exception aiohttp
raises keeps the reading frame in a reference cycle."""

from __future__ import annotations

import asyncio
import gc
import math
import socket
import tracemalloc

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.http_guard import BODY_KEY, RequestGuard

MB = 1 << 20


def _app() -> tuple[web.Application, Metrics]:
    cfg = NetConfig(key_work_per_s=math.inf, address_work_per_s=math.inf, stranger_exchanges_per_s=math.inf)
    metrics = Metrics(process=False)
    guard = RequestGuard(cfg, metrics, max_body_bytes=16 * MB, min_body_rate=1.0)

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=request[BODY_KEY])

    app = web.Application(middlewares=[guard.middleware()])
    app.router.add_post("/v1/anything", handler)
    return app, metrics


@pytest.mark.parametrize("chunked", [True, False])
def test_a_body_in_many_pieces_reaches_the_handler_whole(chunked: bool):
    pieces = [bytes([i]) * (1000 + 37 * i) for i in range(200)]  # ~940 kB in uneven pieces

    async def post() -> bytes:
        async def body():
            for piece in pieces:
                yield piece
                await asyncio.sleep(0)

        app, _ = _app()
        async with TestClient(TestServer(app)) as client:
            data = body() if chunked else b"".join(pieces)
            resp = await client.post("/v1/anything", data=data)
            assert resp.status == 200
            return await resp.read()

    assert asyncio.run(post()) == b"".join(pieces)


def test_a_body_cut_off_part_way_is_let_go_without_a_collection():
    """8 MB of a declared 16 MB, then the sender closes: once the guard has refused it
    (`body_incomplete`), Python holds less than 2 MB more than before, with the cyclic collector
    off (what aiohttp still buffers for the connection is at most ~0.75 MB)."""
    sent = 8 * MB

    async def attack() -> int:
        app, metrics = _app()
        async with TestServer(app) as server:
            loop = asyncio.get_running_loop()
            before = tracemalloc.get_traced_memory()[0]

            def send() -> None:
                with socket.create_connection((server.host, server.port)) as s:
                    s.sendall(b"POST /v1/anything HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (16 * MB))
                    s.sendall(b"\0" * sent)

            await loop.run_in_executor(None, send)
            for _ in range(200):
                if metrics.get("http_refused_total", reason="body_incomplete"):
                    break
                await asyncio.sleep(0.05)
            assert metrics.get("http_refused_total", reason="body_incomplete") == 1
            return tracemalloc.get_traced_memory()[0] - before

    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        kept = asyncio.run(attack())
    finally:
        tracemalloc.stop()
        gc.enable()
    assert kept < 2 * MB, f"{kept / MB:.1f} MB of a cut-off body still held"
