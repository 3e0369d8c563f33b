"""A real AsyncDriver and its HTTP server on their own event loop thread, serving on 127.0.0.1,
for driver tests."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Iterator

import torch

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.net.driver import AsyncDriver
from peer.net.http_server import HttpServer
from peer.local.status_history import LossHistory
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.node_worker import NodeWorker
from protocol import Identity

DIM = 16


@dataclass
class Network:
    """A driver and the HTTP server the runtime would start beside it, started and stopped in
    the runtime's order (`peer.runtime.GossipPeer`); /v1/status shows `history`."""

    driver: AsyncDriver
    server: HttpServer
    history: LossHistory

    @classmethod
    def of(cls, driver: AsyncDriver) -> "Network":
        history = LossHistory()
        return cls(driver, HttpServer(driver, driver.worker, driver.net_cfg, driver.metrics,
                                      driver.session.cfg, history), history)

    async def start(self) -> str:
        return await self.driver.async_start(await self.server.start())

    async def stop(self) -> None:
        await self.driver.async_stop()
        await self.server.stop()


@dataclass
class RunningDriver:
    driver: AsyncDriver
    node: GossipNode
    loop: asyncio.AbstractEventLoop
    network: Network

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        """Run `coro` on the driver's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextmanager
def running_driver(seed: int, on_adopt: Callable[[torch.Tensor, int], None] = lambda x, step: None, *,
                   stop: bool = True) -> Iterator[RunningDriver]:
    """A started driver of a DIM-parameter node (key from `seed`), not joining; stopped after
    (unless the test stops it itself: `stop=False`), its loop and node worker closed."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    node = GossipNode(GossipConfig(swarm="driver-test"), Identity.generate(bytes([seed]) * 32),
                      {"w": ((DIM,), "float32")}, torch.zeros(DIM), now=time.time())
    worker = NodeWorker(node, time.time)
    driver = AsyncDriver(worker, SessionConfig(join=False), NetConfig(listen="127.0.0.1:0", mdns=False), Metrics(),
                         emit=lambda line: None, on_adopt=on_adopt)
    running = RunningDriver(driver, node, loop, Network.of(driver))
    try:
        running.call(running.network.start())
        yield running
    finally:
        try:
            if stop:
                running.call(running.network.stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
            worker.close()


def wait_for_line(lines: list[str], pattern: str, timeout: float = 60) -> re.Match:
    """The first of `lines` (a peer's emitted lines, still growing) matching `pattern`."""
    waiter = threading.Event()
    for _ in range(int(timeout / 0.05)):
        for line in list(lines):
            if m := re.search(pattern, line):
                return m
        waiter.wait(0.05)
    raise AssertionError(f"no {pattern!r} in {lines[-5:]}")
