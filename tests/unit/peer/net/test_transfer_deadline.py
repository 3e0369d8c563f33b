"""The real driver gives a state transfer a deadline that grows with the model, not the fixed
timeout of a hello: a state that arrives slower than `request_timeout_s` but faster than the
floor rate is read whole (then verified on the worker), and one slower than the floor is cut."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from aiohttp import web

from peer.core import FetchState
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.driver import AsyncDriver
from peer.net.node_worker import NodeWorker
from protocol import Identity

NUMEL = 500_000  # a 2 MB snapshot
STATE_BYTES = 400_000
DRIP_S = 1.2  # the state takes this long to arrive: longer than request_timeout_s below


async def _slow_state(request: web.Request) -> web.StreamResponse:
    """Garbage of STATE_BYTES, dripped over DRIP_S (the worker refuses it once read: what counts is
    whether it was read at all)."""
    response = web.StreamResponse(headers={"Content-Length": str(STATE_BYTES)})
    await response.prepare(request)
    pieces = 12
    for _ in range(pieces):
        await asyncio.sleep(DRIP_S / pieces)
        await response.write(b"\x00" * (STATE_BYTES // pieces))
    await response.write(b"\x00" * (STATE_BYTES - pieces * (STATE_BYTES // pieces)))
    await response.write_eof()
    return response


@pytest.mark.parametrize("rate, read_whole", [(1e6, True), (1e7, False)])
def test_a_state_slower_than_the_request_timeout_but_above_the_floor_rate_is_read(rate: float, read_whole: bool):
    """A 2 MB snapshot and a 0.4-s request timeout: at a 1 MB/s floor the deadline is 2.4 s and
    the state that takes 1.2 s is read whole; at a 10 MB/s floor it is 0.6 s and the same state,
    arriving slower than that floor, is cut before it is read."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    metrics = Metrics()
    node = GossipNode(GossipConfig(swarm="deadline", partner_steps=0.0), Identity.generate(b"\x33" * 32),
                      {"w": ((NUMEL,), "float32")}, torch.zeros(NUMEL), now=time.time(), metrics=metrics)
    worker = NodeWorker(node, time.time)
    session = SessionConfig(join=False, request_timeout_s=0.4, connect_timeout_s=0.4, min_transfer_rate=rate)
    driver = AsyncDriver(worker, session, NetConfig(listen="127.0.0.1:0", mdns=False), metrics,
                         emit=lambda line: None, on_adopt=lambda x, step: None)
    app = web.Application()
    app.router.add_get("/v1/state", _slow_state)
    runner = web.AppRunner(app)

    async def serve() -> str:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    try:
        address = on_loop(serve())
        on_loop(driver.async_start(1))  # no server of its own: only its client is used
        assert (session.transfer_deadline_s(node.snapshot_bytes) > DRIP_S) is read_whole
        driver.loop.call_soon_threadsafe(driver.perform, FetchState(7, address))
        deadline = time.monotonic() + 2 * DRIP_S + 3
        while time.monotonic() < deadline and metrics.get("worker_cpu_seconds_total", task="read_state") == 0:
            time.sleep(0.05)
        assert (metrics.get("worker_cpu_seconds_total", task="read_state") > 0) is read_whole
    finally:
        on_loop(driver.async_stop())
        on_loop(runner.cleanup())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        worker.close()
