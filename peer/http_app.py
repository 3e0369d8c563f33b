"""The aiohttp server of a peer: the HTTP face of `peer.driver.AsyncDriver`.

Handlers decide nothing and never touch the model or the node: node work (verify,
decode, apply, sign) is awaited on the node worker through the driver, so the event loop
keeps answering while it runs.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from peer.http_guard import BODY_KEY, RequestGuard
from peer.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from peer.node_worker import WorkerBusy
from peer.shard_routes import add_shard_routes
from peer.status import StatusService
from protocol import FrameRefused

if TYPE_CHECKING:
    from peer.driver import AsyncDriver

DRIVER_KEY: web.AppKey["AsyncDriver"] = web.AppKey("driver")
STATE_CHUNK = 1 << 20
"""Bytes per write of a /v1/state answer (slices of one buffer: no copies)."""


async def _exchange(request: web.Request) -> web.Response:
    driver = request.app[DRIVER_KEY]
    if not driver.session.accepting:  # still joining: our public copy is about to be replaced
        return web.json_response({"retry": "joining"}, status=503)
    body = request.get(BODY_KEY)
    if body is None:
        return _refused(driver, 400, "no_body", "an exchange needs a body")
    try:
        reply = await driver.serve_exchange(body, request.remote or "")
    except FrameRefused as exc:
        driver.metrics.inc("frames_refused_total", reason=exc.reason.value)
        return web.json_response({"refused": exc.reason.value, "detail": exc.detail[:200]}, status=400)
    except WorkerBusy as exc:
        return _refused(driver, 503, "worker_busy", str(exc))
    except ValueError as exc:  # our own state cannot be encoded (e.g. non-finite parameters)
        return web.json_response({"error": str(exc)[:200]}, status=500)
    return web.Response(body=reply, content_type="application/octet-stream")


async def _state(request: web.Request) -> web.StreamResponse:
    driver = request.app[DRIVER_KEY]
    try:
        data = await driver.serve_state()
    except WorkerBusy as exc:
        return _refused(driver, 503, "worker_busy", str(exc))
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
    await response.prepare(request)
    view = memoryview(data)
    try:  # a reader that stops reading holds its connection only until the asker's own deadline
        await asyncio.wait_for(_write_all(response, view), driver.session.cfg.request_timeout_s)
    except asyncio.TimeoutError:
        driver.metrics.inc("http_refused_total", reason="slow_reader")
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


async def _write_all(response: web.StreamResponse, view: memoryview) -> None:
    for i in range(0, len(view), STATE_CHUNK):
        await response.write(view[i : i + STATE_CHUNK])


def _refused(driver: "AsyncDriver", status: int, reason: str, text: str) -> web.Response:
    driver.metrics.inc("http_refused_total", reason=reason)
    return web.json_response({"refused": reason, "detail": text[:200]}, status=status)


async def _hello(request: web.Request) -> web.Response:
    nonce = request.query.get("nonce", "")[:64]
    return web.Response(body=request.app[DRIVER_KEY].serve_hello(nonce), content_type="application/octet-stream")


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[DRIVER_KEY].metrics.render().encode()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


def build_app(driver: "AsyncDriver") -> web.Application:
    max_body = driver.node.limits.max_frame_bytes  # a larger bundle is refused by unpack_bundle anyway
    app = web.Application(client_max_size=max_body,
                          middlewares=[RequestGuard(driver.net_cfg, driver.metrics, max_body).middleware()])
    app[DRIVER_KEY] = driver
    app.router.add_post("/v1/exchange", _exchange)
    app.router.add_get("/v1/state", _state)
    app.router.add_get("/v1/hello", _hello)
    app.router.add_get("/metrics", _metrics)
    add_shard_routes(app, driver)
    status = StatusService(driver)
    app.router.add_get("/v1/status", status.serve_status)
    app.router.add_get("/", status.serve_page)
    app.cleanup_ctx.append(status.background)
    return app
