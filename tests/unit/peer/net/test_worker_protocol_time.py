"""The publish budget counts the node worker's CPU on our own gossip only: what we answer other
peers is paid at their cadence, and counted it would let a stranger's requests stretch ours."""

from __future__ import annotations

import asyncio

import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from peer.net.node_worker import NodeWorker
from protocol import Identity

NOW = 1_000_000.0
DIM = 200_000


def node(i: int) -> GossipNode:
    x = torch.randn(DIM, generator=torch.Generator().manual_seed(i)) * 0.02
    return GossipNode(GossipConfig(swarm="t"), Identity.generate(bytes([i + 1]) * 32), {"w": ((DIM,), "float32")}, x,
                      now=NOW, metrics=Metrics(process=False))


def test_answering_others_is_not_our_protocol_time_and_our_own_exchanges_are():
    me, them = node(0), node(1)
    worker = NodeWorker(me, lambda: NOW)
    key = them.identity.public_key

    async def answer_many() -> None:
        for _ in range(6):  # another peer's requests, each answered in full (a snapshot of ours)
            body = them.build_request(me.identity.public_key if me.identity.public_key in them.neighbours else None, NOW)
            reply, _ = await worker.handle_request(body, "127.0.0.1", frozenset({key}))
            them.handle_response(reply, NOW)
        await worker.state_frame()

    async def exchange_once() -> None:
        reply, _ = them.handle_request(await worker.build_request(None), NOW, verified={me.identity.public_key})
        await worker.handle_response(reply)
        reply, _ = them.handle_request(await worker.build_request(key), NOW, verified={me.identity.public_key})
        await worker.handle_response(reply)

    try:
        asyncio.run(answer_many())
        answered = me.metrics.total("worker_cpu_seconds_total")
        assert answered > 0 and worker.protocol_cpu_s() == 0.0
        asyncio.run(exchange_once())
        assert worker.protocol_cpu_s() > 0.0
    finally:
        worker.close()
