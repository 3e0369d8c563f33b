"""A frame that cannot change the copy we hold of its sender is dropped once its signature and header
are checked, before its payload is read (`peer.core.ingest.unchanging`): a snapshot at or below the
held seq is refused (`stale_seq`), so a pre-signed snapshot replayed under fresh tickets, or signed
again with a new stamp, is never applied twice; an update that cannot follow the held copy is a gap.
A newer snapshot still applies."""

from __future__ import annotations

import pytest
import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from protocol import FrameKind, Identity, VerifiedFrame, make_snapshot_frame, make_update_frame, pack_bundle
from tests.unit.exchange_helpers import push

N = 4096
NOW = 1_000_000.0
CFG = GossipConfig(swarm="t", gossip_every=1, compression="topk:0.1+int8", staleness="constant")


def node(i: int) -> GossipNode:
    return GossipNode(CFG, Identity.generate(bytes([i + 1]) * 32), {"w": ((N,), "float32")}, torch.zeros(N),
                      now=NOW, metrics=Metrics())


def key(n: GossipNode) -> bytes:
    return n.identity.public_key


def snapshot(a: GossipNode, seq: int, now: float, value: float) -> bytes:
    return make_snapshot_frame(a.identity, swarm="t", fingerprint=a.fingerprint, seq=seq, step=seq, timestamp=now,
                               vector=torch.full((N,), value), extra={"epoch": a.epoch})


def ready(decoded: list[FrameKind]) -> tuple[GossipNode, GossipNode]:
    """(a, b): a holds a ticket of b's; b holds a's copy at seq 0, counted in `snapshots_received_total`."""
    a, b = node(0), node(1)
    push(b, a, NOW)  # b's pull brings a's snapshot at seq 0
    assert b.metrics.get("snapshots_received_total") == 1
    decoded.clear()
    return a, b


def send(a: GossipNode, b: GossipNode, frames: list[bytes], now: float) -> None:
    """A request of `a`'s to `b` spending a live ticket of `b`'s, binding `frames`; `a` keeps the answer's ticket."""
    to_epoch, ticket = a.held_tickets.take(key(b))
    assert ticket
    control = a._control_frame(key(b), now, to_epoch=to_epoch, ticket=ticket, reply=a.tickets.issue(key(b)),
                               offer=a.tickets.issue(key(b)), frames=frames)
    reply, result = b.handle_request(pack_bundle([control] + frames), now)
    assert result.accepted
    a.handle_response(reply, now)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[FrameKind]:
    """The kind of every update or snapshot whose payload is decoded."""
    kinds: list[FrameKind] = []
    real = VerifiedFrame.decode

    def counting(self: VerifiedFrame):
        if self.header.kind in (FrameKind.UPDATE, FrameKind.SNAPSHOT):
            kinds.append(self.header.kind)
        return real(self)

    monkeypatch.setattr(VerifiedFrame, "decode", counting)
    return kinds


def test_a_replayed_snapshot_is_refused_unread_and_never_applied_twice(decoded: list[FrameKind]) -> None:
    a, b = ready(decoded)
    frame = snapshot(a, 5, NOW, 1.0)
    send(a, b, [frame], NOW)
    assert b.metrics.get("snapshots_received_total") == 2 and decoded == [FrameKind.SNAPSHOT]
    b.neighbours[key(a)].copy.x_hat.fill_(0.5)  # were it applied again, the copy would change back
    for i in range(20):  # the same bytes under fresh tickets, as often as the answers hand them out
        send(a, b, [frame], NOW + 1 + i)
    send(a, b, [snapshot(a, 5, NOW + 30, 2.0)], NOW + 30)  # signed again, with a new stamp
    send(a, b, [snapshot(a, 4, NOW + 31, 3.0)], NOW + 31)  # older
    assert b.metrics.get("snapshots_received_total") == 2
    assert b.metrics.get("frames_refused_total", reason="stale_seq") == 22
    assert decoded == [FrameKind.SNAPSHOT]  # none of the 22 payloads was read
    assert torch.equal(b.neighbours[key(a)].copy.x_hat, torch.full((N,), 0.5))


def test_a_newer_snapshot_still_applies(decoded: list[FrameKind]) -> None:
    a, b = ready(decoded)
    send(a, b, [snapshot(a, 5, NOW, 1.0)], NOW)
    send(a, b, [snapshot(a, 6, NOW + 1, 2.0)], NOW + 1)
    assert b.metrics.get("snapshots_received_total") == 3
    assert torch.equal(b.neighbours[key(a)].copy.x_hat, torch.full((N,), 2.0))


def test_an_update_that_cannot_follow_the_held_copy_is_a_gap_unread(decoded: list[FrameKind]) -> None:
    a, b = ready(decoded)
    send(a, b, [snapshot(a, 5, NOW, 1.0)], NOW)
    delta = torch.zeros(N)
    delta[:8] = 1.0
    kw = dict(swarm="t", fingerprint=a.fingerprint, step=9, timestamp=NOW + 1, codec="topk:0.1+int8",
              delta=delta, extra={"epoch": a.epoch})
    send(a, b, [make_update_frame(a.identity, seq=9, **kw)[0], make_update_frame(a.identity, seq=5, **kw)[0]], NOW + 1)
    assert b.metrics.get("update_gaps_total") == 1 and b.metrics.get("updates_duplicate_total") == 1
    assert decoded == [FrameKind.SNAPSHOT]
    send(a, b, [make_update_frame(a.identity, seq=6, **kw)[0]], NOW + 2)  # the next in order applies
    assert b.metrics.get("updates_applied_total") == 1 and decoded == [FrameKind.SNAPSHOT, FrameKind.UPDATE]
