"""The same event trace through the asyncio driver and simnet's driver gives the same actions:
neither driver decides anything of its own (docs/architecture.md, "One core, two drivers")."""

from __future__ import annotations

import random

import torch

from peer.core.actions import Exchange, FetchState, SendHello
from peer.core.addresses import PeerInfo
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.hello import Hello
from peer.core.node import GossipNode
from peer.core.session import Session
from peer.net.driver import AsyncDriver
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.node_worker import NodeWorker
from protocol import Identity
from simnet.runs.config import world_from_dict
from simnet.runs.swarm import GossipSim

CFG = SessionConfig(join=True, max_in_flight=2, hello_every_s=3.0)
PEERS = [f"peer{i}.sim:7000" for i in range(1, 5)]
IDS = {a: f"{i + 1:02x}" * 32 for i, a in enumerate(PEERS)}


class Clock:
    t = 0.0


def real_driver(clock: Clock, on_adopt=lambda x, step: None) -> tuple[AsyncDriver, list]:
    identity = Identity.generate(b"\x07" * 32)
    node = GossipNode(GossipConfig(swarm="t"), identity, {"w": ((4,), "float32")}, torch.zeros(4), now=1e9)
    driver = AsyncDriver(NodeWorker(node, lambda: 1e9), CFG, NetConfig(listen="127.0.0.1:0", mdns=False),
                         Metrics(), emit=lambda line: None, on_adopt=on_adopt)
    driver.address = "peer0.sim:7000"
    return driver, _wire(driver, clock, identity)


def sim_driver(clock: Clock):
    sim = GossipSim(world_from_dict({"n_peers": 2, "model": "lsq", "duration_s": 1.0}), seed=0)
    driver = sim.peers[0]
    return driver, _wire(driver, clock, driver.identity)


def _wire(driver, clock: Clock, identity: Identity) -> list:
    """Same session state, same clock; actions are recorded and not performed."""
    performed: list = []
    driver.session = Session(CFG, peer_id=identity.peer_id, rng=random.Random(42))
    driver.perform = performed.append
    if isinstance(driver, AsyncDriver):
        driver.mono = lambda: clock.t
    else:
        driver.world.sched._now = 0.0
        driver.world.now = lambda: clock.t
    return performed


def replay(driver, performed: list, clock: Clock) -> list:
    """A scripted life: start and join, discovery, training, replies, failures, timers."""

    def at(t: float) -> None:
        clock.t = t

    def answer_hellos(step: int) -> None:
        for a in [a for a in performed if isinstance(a, SendHello) and a.token not in answered]:
            answered.add(a.token)
            peers = (PeerInfo(peer_id=IDS[PEERS[3]], address=PEERS[3], source="exchange"),)
            driver.dispatch(driver.session.hello_done(a.token, clock.t, hello=Hello(IDS[a.address], step, a.address, peers)))

    answered: set[int] = set()
    at(0.0)
    driver.on_start(PEERS[:2], step=0)
    at(0.1)
    driver.on_found(PeerInfo(peer_id="", address=PEERS[2], source="mdns"))
    at(0.3)
    answer_hellos(step=50)
    fetch = [a for a in performed if isinstance(a, FetchState)]
    driver.dispatch(driver.session.state_done(fetch[0].token, 0.4, step=50))
    answer_hellos(step=60)
    for k in range(1, 13):
        at(0.5 + k * 0.1)
        driver.on_boundary(50 + k, k % 4 == 0)
    exchanges = [a for a in performed if isinstance(a, Exchange)]
    driver.dispatch(driver.session.exchange_done(exchanges[0].token, 2.0, peer_id=IDS[exchanges[0].address], rtt=0.2))
    driver.dispatch(driver.session.exchange_done(exchanges[1].token, 2.1, error="timeout"))
    for t in (2.5, 3.5, 5.0, 8.0, 130.0):
        at(t)
        driver.on_tick()
    return performed


def test_both_drivers_turn_one_trace_into_the_same_actions():
    c1, c2 = Clock(), Clock()
    real, real_log = real_driver(c1)
    sim, sim_log = sim_driver(c2)
    a, b = replay(real, real_log, c1), replay(sim, sim_log, c2)
    kinds = {type(x).__name__ for x in a}
    assert {"SendHello", "FetchState", "Adopt", "JoinDone", "Publish", "Exchange", "Forget"} <= kinds, kinds
    assert a == b


def test_both_drivers_adopt_a_state_at_the_step_it_was_at() -> None:
    """Both drivers hand the trainer and the node the adopted state's step, which the joiner then
    counts on from (it had counted from 0 again, behind the swarm for good)."""
    import asyncio

    from peer.core.actions import Adopt

    handed: list[int] = []
    driver, _ = real_driver(Clock(), on_adopt=lambda x, step: handed.append(step))
    adopt = Adopt(token=9, address=PEERS[0], step=123)
    driver._fetched.judged(9, torch.full((4,), 3.0), [adopt])
    asyncio.run(driver._adopt(adopt))
    assert handed == [123] and driver.node.step == 123
    sim, _ = sim_driver(Clock())
    node = sim._node()
    adopt = Adopt(token=9, address=sim.world.book.host(1).address, step=123)
    sim._fetched.judged(9, node.public.x_hat.clone(), [adopt])
    sim._adopt_job(adopt)
    assert sim.trainer.step_count == node.step == 123
