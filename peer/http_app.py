"""The aiohttp server of a peer: the HTTP face of `peer.driver.AsyncDriver`.

Handlers decide nothing and never touch the model or the node: node work (verify,
decode, apply, sign) is awaited on the node worker through the driver, so the event loop
keeps answering while it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from peer.http_guard import RequestGuard
from peer.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from peer.shard_routes import add_shard_routes
from peer.status import StatusService
from protocol import FrameRefused

if TYPE_CHECKING:
    from peer.driver import AsyncDriver

DRIVER_KEY: web.AppKey["AsyncDriver"] = web.AppKey("driver")


async def _exchange(request: web.Request) -> web.Response:
    driver = request.app[DRIVER_KEY]
    if not driver.session.accepting:  # still joining: our public copy is about to be replaced
        return web.json_response({"retry": "joining"}, status=503)
    body = await request.read()
    try:
        reply = await driver.serve_exchange(body)
    except FrameRefused as exc:
        driver.metrics.inc("frames_refused_total", help="frames refused, by reason", reason=exc.reason.value)
        return web.json_response({"refused": exc.reason.value, "detail": exc.detail[:200]}, status=400)
    except ValueError as exc:  # our own state cannot be encoded (e.g. non-finite parameters)
        return web.json_response({"error": str(exc)[:200]}, status=500)
    return web.Response(body=reply, content_type="application/octet-stream")


async def _state(request: web.Request) -> web.StreamResponse:
    data = await request.app[DRIVER_KEY].serve_state()
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
    await response.prepare(request)
    chunk = 1 << 20
    for i in range(0, len(data), chunk):
        await response.write(data[i : i + chunk])
    await response.write_eof()
    return response


async def _hello(request: web.Request) -> web.Response:
    nonce = request.query.get("nonce", "")[:64]
    return web.Response(body=request.app[DRIVER_KEY].serve_hello(nonce), content_type="application/octet-stream")


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[DRIVER_KEY].metrics.render().encode()
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


def build_app(driver: "AsyncDriver") -> web.Application:
    app = web.Application(client_max_size=driver.node.limits.max_frame_bytes * 2,
                          middlewares=[RequestGuard(driver.net_cfg, driver.metrics).middleware()])
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
