"""A state transfer cut short resumes where it stopped (`peer.net.state_resume`,
`peer.net.state_fetch`): the served frame is named by an ETag, a resume asks for the bytes it lacks
of that frame, and a peer that published since sends its new frame whole."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest
from aiohttp import web

from peer.metrics import Metrics
from peer.net.http_app import PeerRoutes
from peer.net.state_fetch import fetch_state
from peer.net.state_resume import resume_offset, resumed_total, state_etag

FRAME = os.urandom(300_000)
NEWER = os.urandom(200_000)


def test_the_etag_names_the_frame_by_its_signature_tail():
    assert state_etag(FRAME) == '"' + FRAME[-16:].hex() + '"'
    assert state_etag(FRAME) != state_etag(NEWER)


@pytest.mark.parametrize("range_header, if_range, offset", [
    ("bytes=1000-", "E", 1000),
    (" bytes=299999- ", "E", 299_999),
    ("bytes=1000-", '"other"', 0),        # another frame: the whole of this one
    ("bytes=1000-", None, 0),             # no If-Range: a resume must name the frame
    (None, "E", 0),
    ("bytes=0-", "E", 0),
    ("bytes=300000-", "E", 0),            # past the end
    ("bytes=10-20", "E", 0),              # only the open-ended form is served partially
    ("bytes=-500", "E", 0),
    ("bytes=1-2,5-", "E", 0),
    ("bytes=" + "9" * 40 + "-", "E", 0),
    ("items=5-", "E", 0),
])
def test_only_an_open_range_of_the_same_frame_is_served_partially(range_header, if_range, offset):
    assert resume_offset(range_header, if_range, "E", len(FRAME)) == offset


@pytest.mark.parametrize("header, start, total", [
    ("bytes 1000-299999/300000", 1000, 300_000),
    ("bytes 1000-299998/300000", 1000, None),   # stops short of the end
    ("bytes 999-299999/300000", 1000, None),    # does not continue where we stopped
    ("bytes 1000-299999/*", 1000, None),
    (None, 1000, None),
    ("bytes 300000-299999/300000", 300_000, None),
])
def test_a_resumed_answer_must_continue_to_the_end(header, start, total):
    assert resumed_total(header, start) == total


class Flaky:
    """A /v1/state server: serves `frames[0]` (then `frames[1]`, once `publish_after` requests have
    come), cutting the first `breaks` answers off after `cut` bytes; through the real PeerRoutes.state."""

    def __init__(self, frames: list[bytes], breaks: int, cut: int = 100_000, publish_after: int | None = None) -> None:
        self.frames, self.breaks, self.cut, self.publish_after = frames, breaks, cut, publish_after
        self.requests: list[tuple[str | None, str | None]] = []
        self.metrics = Metrics()
        self.routes = PeerRoutes(self, self.metrics, lambda n: 30.0)

    async def serve_state(self) -> bytes:
        late = self.publish_after is not None and len(self.requests) > self.publish_after
        return self.frames[1 if late else 0]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.headers.get("Range"), request.headers.get("If-Range")))
        if len(self.requests) > self.breaks:
            return await self.routes.state(request)
        data = await self.serve_state()
        etag = state_etag(data)
        start = resume_offset(request.headers.get("Range"), request.headers.get("If-Range"), etag, len(data))
        headers = {"Content-Length": str(len(data) - start), "ETag": etag}
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        response = web.StreamResponse(status=206 if start else 200, headers=headers)
        await response.prepare(request)
        await response.write(data[start:start + self.cut])
        request.transport.abort()  # the link drops mid-transfer
        return response


async def _fetch(handler, resumes: int) -> bytes:
    """fetch_state from an in-process server whose /v1/state is `handler`."""
    app = web.Application()
    app.router.add_get("/v1/state", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as client:
            return await fetch_state(client, f"http://127.0.0.1:{port}/v1/state", limit=1 << 20, resumes=resumes,
                                     timeout_for=lambda got: aiohttp.ClientTimeout(total=10))
    finally:
        await runner.cleanup()


def test_a_broken_transfer_resumes_where_it_stopped():
    server = Flaky([FRAME], breaks=2)
    assert asyncio.run(_fetch(server.handle, resumes=4)) == FRAME
    etag = state_etag(FRAME)
    assert server.requests == [(None, None), ("bytes=100000-", etag), ("bytes=200000-", etag)]
    assert server.metrics.get("states_resumed_total") == 1  # the last answer sent only the rest


def test_without_resumes_a_broken_transfer_fails():
    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(_fetch(Flaky([FRAME], breaks=1).handle, resumes=0))


def test_resumes_are_counted_and_run_out():
    server = Flaky([FRAME], breaks=3, cut=60_000)
    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(_fetch(server.handle, resumes=2))
    assert len(server.requests) == 3


def test_a_peer_that_published_since_sends_its_new_state_whole():
    server = Flaky([FRAME, NEWER], breaks=1, publish_after=1)
    assert asyncio.run(_fetch(server.handle, resumes=4)) == NEWER
    assert server.requests[1] == ("bytes=100000-", state_etag(FRAME))
    assert server.metrics.get("states_resumed_total") == 0


def test_an_answer_that_does_not_continue_the_transfer_is_refused():
    async def lying(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Range") is None:
            response = web.StreamResponse(headers={"Content-Length": str(len(FRAME)), "ETag": state_etag(FRAME)})
            await response.prepare(request)
            await response.write(FRAME[:1000])
            request.transport.abort()
            return response
        return web.Response(status=206, body=b"x" * 10, headers={"ETag": state_etag(FRAME),
                                                                 "Content-Range": "bytes 0-9/300000"})

    with pytest.raises(RuntimeError, match="did not continue where the transfer stopped"):
        asyncio.run(_fetch(lying, resumes=3))
