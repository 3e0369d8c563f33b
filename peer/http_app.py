"""The aiohttp server of a peer: the endpoints of DESIGN.md §5.

Handlers never touch the model: CPU-heavy work (verifying, decompressing, signing) runs
in the default executor so the event loop keeps answering, and parameters are only read
from what the training thread left at its last step boundary.
"""

from __future__ import annotations

import asyncio
import json
from typing import Callable

from aiohttp import web

from peer.gossip.node import GossipNode
from peer.metrics import Metrics
from protocol import FrameRefused

NODE_KEY: web.AppKey[GossipNode] = web.AppKey("node", GossipNode)
METRICS_KEY: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
HELLO_KEY: web.AppKey[Callable[[], bytes]] = web.AppKey("hello", Callable)
INBOUND_KEY: web.AppKey[Callable[[str, bytes], None]] = web.AppKey("inbound", Callable)

async def _exchange(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    metrics = request.app[METRICS_KEY]
    if not node.accepting:  # still joining: our public copy is about to be replaced
        return web.json_response({"retry": "joining"}, status=503)
    body = await request.read()
    loop = asyncio.get_running_loop()
    try:
        reply, result = await loop.run_in_executor(None, node.handle_request, body)
    except ValueError as exc:  # our own state cannot be encoded (e.g. non-finite parameters)
        return web.json_response({"error": str(exc)[:200]}, status=500)
    except FrameRefused as exc:
        metrics.inc("frames_refused_total", help="frames refused, by reason", reason=exc.reason.value)
        return web.json_response({"refused": exc.reason.value, "detail": exc.detail[:200]}, status=400)
    request.app[INBOUND_KEY](result.listen, result.sender)
    return web.Response(body=reply, content_type="application/octet-stream")


async def _state(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE_KEY]
    data = await asyncio.get_running_loop().run_in_executor(None, node.state_frame)
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
    await response.prepare(request)
    chunk = 1 << 20
    for i in range(0, len(data), chunk):
        await response.write(data[i : i + chunk])
    await response.write_eof()
    return response


async def _hello(request: web.Request) -> web.Response:
    body = request.app[HELLO_KEY]()
    return web.Response(body=body, content_type="application/octet-stream")


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(text=request.app[METRICS_KEY].render(), content_type="text/plain", charset="utf-8")


async def _status(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    metrics = request.app[METRICS_KEY]
    status = {
        "peer_id": node.peer_id,
        "swarm": node.cfg.swarm,
        "fingerprint": node.fingerprint,
        "listen": node.listen,
        "step": metrics.get("steps"),
        "loss": metrics.get("loss"),
        "neighbours": len(node.neighbours),
    }
    return web.Response(text=json.dumps(status, indent=2) + "\n", content_type="application/json")


def build_app(node: GossipNode, metrics: Metrics, hello: Callable[[], bytes], on_inbound: Callable[[str, bytes], None]) -> web.Application:
    app = web.Application(client_max_size=node.limits.max_frame_bytes * 2)
    app[NODE_KEY] = node
    app[METRICS_KEY] = metrics
    app[HELLO_KEY] = hello
    app[INBOUND_KEY] = on_inbound
    app.router.add_post("/v1/exchange", _exchange)
    app.router.add_get("/v1/state", _state)
    app.router.add_get("/v1/hello", _hello)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/", _status)
    return app
