"""An adoption runs off the event loop: while the trainer loads an adopted state (a full copy
to the device, or a broadcast to every rank of a group: peer/group.py), the peer keeps
answering hellos, /v1/status and /metrics (docs/architecture.md, "Three threads")."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request

import torch

from peer.core.actions import Adopt
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.driver import AsyncDriver
from peer.metrics import Metrics
from peer.net_config import NetConfig
from peer.node_worker import NodeWorker
from protocol import Identity

DIM = 16


def test_the_loop_answers_while_the_trainer_adopts() -> None:
    entered, release = threading.Event(), threading.Event()
    loaded: list[torch.Tensor] = []

    def slow_adopt(x: torch.Tensor) -> None:
        entered.set()
        release.wait(5.0)  # bounded: a loop that never answers fails the test below, it does not hang it
        loaded.append(x.clone())

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    node = GossipNode(GossipConfig(swarm="adopt-test"), Identity.generate(b"\x41" * 32), {"w": ((DIM,), "float32")},
                      torch.zeros(DIM), now=time.time())
    worker = NodeWorker(node, time.time)
    driver = AsyncDriver(worker, SessionConfig(join=False), NetConfig(listen="127.0.0.1:0", mdns=False), Metrics(),
                         emit=lambda line: None, on_adopt=slow_adopt)
    x = torch.full((DIM,), 2.5)

    async def adopt() -> None:
        action = Adopt(token=7, address="127.0.0.1:1", step=40)
        driver._fetched.judged(7, x, [action])  # as `_fetch_state` leaves a state the session adopts
        driver.dispatch([action])
        assert driver._adopting is not None
        await driver._adopting

    try:
        asyncio.run_coroutine_threadsafe(driver.async_start(), loop).result(30)
        adoption = asyncio.run_coroutine_threadsafe(adopt(), loop)
        try:
            assert entered.wait(5.0)
            with urllib.request.urlopen(f"http://{driver.address}/v1/hello?nonce=ab12", timeout=2.0) as r:
                assert r.status == 200 and len(r.read()) > 0
            with urllib.request.urlopen(f"http://{driver.address}/metrics", timeout=2.0) as r:
                assert r.status == 200
            assert not adoption.done() and loaded == []  # answered while the trainer was still loading
        finally:
            release.set()
        adoption.result(5.0)
        assert len(loaded) == 1 and torch.equal(loaded[0], x)
        assert torch.equal(node.last_x, x) and node.average.step_offset == 40  # the node adopted after the trainer
        assert len(driver._fetched) == 0
    finally:
        release.set()
        asyncio.run_coroutine_threadsafe(driver.async_stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        worker.close()
