"""The routes of a peer's HTTP server, answering through `PeerFace`, the driver's declared surface.

Handlers decide nothing and never touch the model or the node: node work (verify,
decode, apply, sign) is awaited on the node worker through the driver, so the event loop
keeps answering while it runs. They see the driver only as a `PeerFace`, so the driver need
not know its face (`peer.net.http_server` starts and stops the server).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable, Protocol

from aiohttp import web

from peer.net.http_guard import BODY_KEY, TICKETED_KEY, RequestGuard, remote_key
from peer.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from peer.net.node_worker import WorkerBusy
from peer.net.shard_routes import add_shard_routes
from peer.net.state_resume import resume_offset, state_etag
from peer.net.status import StatusFace, StatusService
from protocol import FrameRefused

if TYPE_CHECKING:
    from peer.core.config import SessionConfig
    from peer.local.status_history import LossHistory
    from peer.metrics import Metrics
    from peer.net.config import NetConfig
    from peer.net.node_worker import NodeWorker
    from peer.net.refusal_bench import RefusalBench
    from peer.net.shard_routes import ShardServer

STATE_CHUNK = 1 << 20
"""Bytes per write of a /v1/state answer (slices of one buffer: no copies)."""


class PeerFace(StatusFace, Protocol):
    """What the HTTP face asks of the driver (`peer.net.driver.AsyncDriver`), on the event loop."""

    @property
    def accepting(self) -> bool:
        """Whether inbound exchanges are served (not while joining)."""
        ...

    async def serve_exchange(self, body: bytes | bytearray, address: str) -> tuple[bytes, bool]:
        """POST /v1/exchange from `address`, the asker's budget key (its IPv4 address or IPv6 /64:
        `peer.core.budget_key`): (the answer, whether the request spent a ticket of ours); raises
        FrameRefused (400), ValueError (500) or WorkerBusy (503)."""
        ...

    async def serve_state(self) -> bytes:
        """GET /v1/state: our signed state (WorkerBusy: 503)."""
        ...

    def serve_hello(self, nonce: str) -> bytes:
        """GET /v1/hello: our signed hello, echoing the asker's nonce."""
        ...


class PeerRoutes:
    """The gossip handlers: /v1/exchange, /v1/state, /v1/hello and /metrics."""

    def __init__(self, face: PeerFace, metrics: "Metrics", deadline_s: Callable[[int], float]) -> None:
        """`deadline_s(n)`: seconds a transfer of n bytes may take (`SessionConfig.transfer_deadline_s`)."""
        self.face, self.metrics, self.deadline_s = face, metrics, deadline_s

    async def exchange(self, request: web.Request) -> web.Response:
        if not self.face.accepting:  # still joining: our public copy is about to be replaced
            return web.json_response({"retry": "joining"}, status=503)
        body = request.get(BODY_KEY)
        if body is None:
            return self._refused(400, "no_body", "an exchange needs a body")
        try:
            reply, request[TICKETED_KEY] = await self.face.serve_exchange(body, remote_key(request))
        except FrameRefused as exc:
            request[TICKETED_KEY] = False
            self.metrics.inc("frames_refused_total", reason=exc.reason.value)
            return web.json_response({"refused": exc.reason.value, "detail": exc.detail[:200]}, status=400)
        except WorkerBusy as exc:
            return self._refused(503, "worker_busy", str(exc))
        except ValueError as exc:  # our own state cannot be encoded (e.g. non-finite parameters)
            return web.json_response({"error": str(exc)[:200]}, status=500)
        return web.Response(body=reply, content_type="application/octet-stream")

    async def state(self, request: web.Request) -> web.StreamResponse:
        try:
            data = await self.face.serve_state()
        except WorkerBusy as exc:
            return self._refused(503, "worker_busy", str(exc))
        etag = state_etag(data)
        start = resume_offset(request.headers.get("Range"), request.headers.get("If-Range"), etag, len(data))
        view = memoryview(data)[start:]  # a resume of this frame gets the bytes it lacks (peer.net.state_resume)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(len(view)), "ETag": etag,
                   "Accept-Ranges": "bytes"}
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            self.metrics.inc("states_resumed_total")
        response = web.StreamResponse(status=206 if start else 200, headers=headers)
        await response.prepare(request)
        try:  # a reader that stops reading holds its connection only until the asker's own deadline
            await asyncio.wait_for(_write_all(response, view), self.deadline_s(len(view)))
        except asyncio.TimeoutError:
            self.metrics.inc("http_refused_total", reason="slow_reader")
            if request.transport is not None:
                request.transport.abort()
            return response
        await response.write_eof()
        return response

    def _refused(self, status: int, reason: str, text: str) -> web.Response:
        self.metrics.inc("http_refused_total", reason=reason)
        return web.json_response({"refused": reason, "detail": text[:200]}, status=status)

    async def hello(self, request: web.Request) -> web.Response:
        nonce = request.query.get("nonce", "")[:64]
        return web.Response(body=self.face.serve_hello(nonce), content_type="application/octet-stream")

    async def render_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render().encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})


async def _write_all(response: web.StreamResponse, view: memoryview) -> None:
    for i in range(0, len(view), STATE_CHUNK):
        await response.write(view[i : i + STATE_CHUNK])


def build_app(face: PeerFace, worker: "NodeWorker", net_cfg: "NetConfig", metrics: "Metrics",
              session_cfg: "SessionConfig", history: "LossHistory", shards: "ShardServer | None" = None,
              bench: "RefusalBench | None" = None) -> web.Application:
    """Every route of a peer; `history` is the loss curve /v1/status shows; `shards` serves
    /v1/shards (None: those answer 404); `bench` hears of refusals (`peer.net.refusal_bench`)."""
    max_body = worker.node.limits.max_frame_bytes  # a larger bundle is refused by unpack_bundle anyway
    guard = RequestGuard(net_cfg, metrics, max_body, model_bytes=4 * worker.node.numel,
                         min_body_rate=session_cfg.min_transfer_rate, bench=bench)
    app = web.Application(client_max_size=max_body, middlewares=[guard.middleware()])
    routes = PeerRoutes(face, metrics, session_cfg.transfer_deadline_s)
    app.router.add_post("/v1/exchange", routes.exchange)
    app.router.add_get("/v1/state", routes.state)
    app.router.add_get("/v1/hello", routes.hello)
    app.router.add_get("/metrics", routes.render_metrics)
    add_shard_routes(app, shards, blocks=net_cfg.blocks())
    status = StatusService(face, worker, metrics, history)
    app.router.add_get("/v1/status", status.serve_status)
    app.router.add_get("/", status.serve_page)
    app.cleanup_ctx.append(status.background)
    return app
