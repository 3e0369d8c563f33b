"""A real aiohttp server of shard routes on 127.0.0.1, run on its own event-loop thread."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.shard_routes import ShardServer, add_shard_routes
from peer.shards.advert import advert_body
from peer.shards.config import SwarmDataConfig
from peer.shards.manifest import Manifest, ShardEntry
from peer.shards.store import ShardStore


def manifest_of(blobs: dict[str, bytes]) -> Manifest:
    return Manifest(tuple(ShardEntry(n, len(b), hashlib.sha256(b).hexdigest(), "mel", 4, 10.0, 1, 1.0) for n, b in blobs.items()))


def own_store(tmp: Path, blobs: dict[str, bytes], present: set[str] | None = None) -> ShardStore:
    """A store of the manifest of `blobs` whose own shards are those named in `present` (default: all)."""
    own = tmp / "own"
    own.mkdir(parents=True, exist_ok=True)
    for name, data in blobs.items():
        if present is None or name in present:
            (own / name).write_bytes(data)
    store = ShardStore(manifest_of(blobs), tmp / "serve-cache", cache_bytes=1 << 30, min_hold_s=0.0, own_dir=own)
    store.open()
    return store


class Served:
    """`app` served on a free port until `close()`; `address` is HOST:PORT."""

    def __init__(self, app: web.Application) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner = web.AppRunner(app)
        self.address = self.call(self._start())

    def call(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)  # type: ignore[arg-type]

    async def _start(self) -> str:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"127.0.0.1:{self.runner.addresses[0][1]}"

    def close(self) -> None:
        self.call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def serve_store(store: ShardStore, cfg: SwarmDataConfig | None = None, metrics: Metrics | None = None) -> tuple[Served, ShardServer]:
    server = ShardServer(store, cfg or SwarmDataConfig(), metrics or Metrics(process=False))
    app = web.Application()
    add_shard_routes(app, server, blocks=NetConfig().blocks())  # as a peer's app adds them
    return Served(app), server


def dying_handler(by_digest: dict[str, bytes], cut: int) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A source that announces a whole shard, sends its first `cut` bytes and goes away."""

    async def dies(request: web.Request) -> web.StreamResponse:
        data = by_digest[request.match_info["digest"]]
        response = web.StreamResponse(headers={"Content-Length": str(len(data))})
        await response.prepare(request)
        await response.write(data[:cut])
        assert request.transport is not None
        request.transport.close()
        return response

    return dies


def serve_handler(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                  advert: tuple[Manifest, list[str]] | None = None) -> Served:
    """Any handler at /v1/shards/{digest} (a lying source, a source that dies mid-shard), and
    with `advert` (manifest, shard hashes) a /v1/shards saying it holds those."""
    app = web.Application()
    app.router.add_get("/v1/shards/{digest}", handler)
    if advert is not None:
        body = advert_body(advert[0].hash, [s.sha256 for s in advert[0].shards], set(advert[1]))

        async def listing(request: web.Request) -> web.Response:
            return web.json_response(body)

        app.router.add_get("/v1/shards", listing)
    return Served(app)


def held_writer() -> tuple[Any, asyncio.Event]:
    """A mocked response writer whose writes wait until the event is set: an upload it serves
    stays open (holding its slot) until then."""
    from unittest import mock

    release = asyncio.Event()
    writer = mock.Mock()
    writer.write_headers = writer.write_eof = writer.drain = mock.AsyncMock()

    async def write(data: bytes) -> None:
        await release.wait()

    writer.write = write
    return writer, release
