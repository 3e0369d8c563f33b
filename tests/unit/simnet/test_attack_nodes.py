"""The protocol attacks' node classes change what the core does where they say: a control arm
that overrides a core method nobody calls any more measures nothing (the slow byzantine test's
trusting arm once equalled its defended arm for that reason)."""

from __future__ import annotations

import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from protocol import Identity
from simnet.attacks.nodes import FutureClockNode, TimestampTrustingNode
from tests.unit.exchange_helpers import push

NOW = 1_000_000.0
AHEAD_S = 290.0
DIM = 64


def node(cls: type, i: int, **kw) -> GossipNode:
    x = torch.randn(DIM, generator=torch.Generator().manual_seed(i))
    return cls(GossipConfig(swarm="t"), Identity.generate(bytes([i + 1]) * 32), {"w": ((DIM,), "float32")}, x,
               now=NOW, metrics=Metrics(process=False), **kw)


def stamp_seen_by(receiver_cls: type) -> float:
    liar, receiver = node(FutureClockNode, 0, lead_s=AHEAD_S), node(receiver_cls, 1)
    liar.publish(liar.public.x_hat.float() + 0.01, 1, NOW)
    push(liar, receiver, NOW)
    return receiver.neighbours[liar.identity.public_key].published_at


def test_the_trusting_control_believes_a_stamp_from_the_future_and_the_core_mirrors_it():
    assert stamp_seen_by(TimestampTrustingNode) == NOW + AHEAD_S
    assert stamp_seen_by(GossipNode) == NOW - AHEAD_S  # mirrored about its arrival
