"""A join that refuses every state it fetched and ends alone keeps none of them: both drivers
hold a fetched state only while the session judges it (peer/core/fetched.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.net.driver import AsyncDriver
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.node_worker import NodeWorker
from protocol import Identity
from simnet.runs.config import world_from_dict
from simnet.runs.swarm import GossipSim
from tests.unit.driver_helpers import Network

DIM = 16
GOSSIP = GossipConfig(swarm="fetched-test")


def _driver(seed: bytes, session: SessionConfig, peers: list[str], probe) -> AsyncDriver:
    node = GossipNode(GOSSIP, Identity.generate(seed * 32), {"w": ((DIM,), "float32")}, torch.zeros(DIM),
                      now=time.time())
    return AsyncDriver(NodeWorker(node, time.time), session, NetConfig(listen="127.0.0.1:0", mdns=False, peers=peers),
                       Metrics(), emit=lambda line: None, on_adopt=lambda x, step: None, probe=probe)


@pytest.mark.parametrize("verdict", ["scores_worse", "not_ahead"])
def test_the_real_driver_keeps_no_refused_state_after_joining_alone(verdict: str) -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    async def at_step(driver: AsyncDriver, step: int) -> None:
        driver.on_boundary(step, False)  # its hellos now say it is `step` along; its state frame says 0

    probed: list[torch.Tensor] = []
    server = _driver(b"\x61", SessionConfig(join=False), [], None)
    joiner = None
    networks = [Network.of(server)]
    try:
        on_loop(networks[0].start())
        on_loop(at_step(server, 10))
        probe = (lambda x: probed.append(x) or False) if verdict == "scores_worse" else None
        joiner = _driver(b"\x62", SessionConfig(join=True, join_timeout_s=10.0), [server.address], probe)
        networks.insert(0, Network.of(joiner))
        on_loop(networks[0].start())
        assert joiner.joined.wait(10.0)
        on_loop(asyncio.sleep(0.05))  # the JoinDone task has run
        m = joiner.metrics
        if verdict == "scores_worse":
            assert len(probed) == 1 and m.total("joins_refused_total") == 1
        assert m.total("joins_alone_total") == 1 and m.total("joins_total") == 0
        assert len(joiner._fetched) == 0
        assert torch.equal(joiner.node.last_x, torch.zeros(DIM))  # nothing adopted
    finally:
        for network in networks:
            on_loop(network.stop())
            network.driver.worker.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_simnet_keeps_no_refused_state_after_joining_alone() -> None:
    sim = GossipSim(world_from_dict({"n_peers": 2, "model": "lsq", "duration_s": 30.0}), seed=0)
    sim.advance_to(3.0)  # peer 1 is some steps along: a joiner fetches its state
    joiner = sim.peers[0]
    joiner.stop("leave")
    joiner.start(sim.make_trainer(0), join=True)
    joiner._judge = lambda: (lambda x: False)  # every offered state scores worse
    sim.advance_to(10.0)
    assert joiner.session is not None and joiner.session.accepting  # the join is over
    assert joiner.metrics.total("joins_refused_total") == 1 and joiner.metrics.total("joins_alone_total") == 1
    assert len(joiner._fetched) == 0
