"""`AsyncDriver.verified_addresses`, which the shard fetcher asks from its own threads: the live
neighbours that answered us, read on the event loop; nothing before the start or once stopped."""

from __future__ import annotations

import asyncio
import threading
import time

import torch

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.driver import AsyncDriver
from peer.net.node_worker import NodeWorker
from protocol import Identity
from tests.unit.driver_helpers import Network


def _driver(seed: int, peers: list[str]) -> AsyncDriver:
    node = GossipNode(GossipConfig(swarm="verified-test"), Identity.generate(bytes([seed]) * 32),
                      {"w": ((8,), "float32")}, torch.zeros(8), now=time.time())
    return AsyncDriver(NodeWorker(node, time.time), SessionConfig(join=False, hello_every_s=0.2),
                       NetConfig(listen="127.0.0.1:0", mdns=False, peers=peers), Metrics(),
                       emit=lambda line: None, on_adopt=lambda x: None)


def test_verified_addresses_lists_a_neighbour_only_once_it_answered() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    a = Network.of(_driver(0x71, []))
    on_loop(a.start())
    b = Network.of(_driver(0x72, [a.driver.address, "127.0.0.1:9"]))  # the second never answers
    assert b.driver.verified_addresses() == []  # not started: no loop to ask
    try:
        on_loop(b.start())
        deadline = time.monotonic() + 10
        while b.driver.verified_addresses() != [a.driver.address] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.driver.verified_addresses() == [a.driver.address]
    finally:
        for network in (b, a):
            on_loop(network.stop())
            network.driver.worker.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert b.driver.verified_addresses() == []  # the loop is closed
