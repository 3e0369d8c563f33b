"""An update frame that arrives again is known without decoding it (`Neighbour.holds`).

It happens every publish period: our pull brings a partner's newest update, and the partner's
own request, built from what our older control frame said we held, pushes the same frame again.
Decoding it (a signature check and a model-sized expansion) only to drop it was a sixth of the
node worker's time (docs/benchmarks/protocol-cpu.md#protocol-cpu-per-publish-period). Its payload must not be
read, it must be counted as before, and change nothing else; its signature is still checked, so
other bytes under a remembered signature are refused, not counted as a duplicate."""

from __future__ import annotations

import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from protocol import FrameKind, Identity, VerifiedFrame, pack_bundle
from tests.unit.exchange_helpers import exchange, push

NOW = 1.7e9
SPEC = {"w": ((512,), "float32")}


def _node(seed: int) -> GossipNode:
    cfg = GossipConfig(swarm="dup", compression="topk:0.1+int8")
    return GossipNode(cfg, Identity.generate(bytes([seed]) * 32), SPEC, torch.zeros(512), now=NOW, metrics=Metrics())


def _opened(monkeypatch) -> list[bytes]:
    """The header of every update or snapshot whose payload the node decodes from now on."""
    opened: list[bytes] = []
    real = VerifiedFrame.decode

    def counting(self):
        if self.header.kind in (FrameKind.UPDATE, FrameKind.SNAPSHOT):
            opened.append(self.header)
        return real(self)

    monkeypatch.setattr(VerifiedFrame, "decode", counting)
    return opened


def _pushed_again(monkeypatch) -> tuple[GossipNode, GossipNode, list[bytes], torch.Tensor]:
    """(a, b, the frames b decoded, b's copy of a before): b pulls a's newest update, then a's
    request pushes it again."""
    a, b = _node(1), _node(2)
    push(a, b, NOW)  # b holds a's snapshot
    push(b, a, NOW)  # a holds b's, and b holds a ticket of a's
    a.publish(torch.randn(512, generator=torch.Generator().manual_seed(0)), 1, NOW + 1)
    exchange(b, a, NOW + 2)  # b's pull brings a's update 1
    copy = b.neighbours[a.identity.public_key].copy.x_hat.clone()
    opened = _opened(monkeypatch)
    exchange(a, b, NOW + 3)  # a's request pushes update 1 again: b's acknowledgement came after
    return a, b, opened, copy


def test_an_update_pushed_again_is_counted_a_duplicate_and_not_decoded(monkeypatch) -> None:
    a, b, opened, copy = _pushed_again(monkeypatch)
    assert b.metrics.get("updates_duplicate_total") == 1
    assert opened == []  # no payload decoded: the frame was known by its signature
    assert torch.equal(b.neighbours[a.identity.public_key].copy.x_hat, copy)


def test_a_new_run_of_the_neighbour_forgets_what_it_held(monkeypatch) -> None:
    a, b = _node(1), _node(2)
    push(a, b, NOW)
    push(b, a, NOW)
    a.publish(torch.randn(512, generator=torch.Generator().manual_seed(0)), 1, NOW + 1)
    exchange(b, a, NOW + 2)
    n = b.neighbours[a.identity.public_key]
    assert len(n.applied) == 1
    n.reset_copy(n.epoch + 1)
    assert len(n.applied) == 0 and n.copy.x_hat is None


def test_a_forged_frame_under_a_remembered_signature_is_refused_not_a_duplicate(monkeypatch) -> None:
    """a's request binds, by its signature, an update 1 whose bytes differ from the one b applied."""
    a, b = _node(1), _node(2)
    push(a, b, NOW)
    push(b, a, NOW)
    a.publish(torch.randn(512, generator=torch.Generator().manual_seed(0)), 1, NOW + 1)
    exchange(b, a, NOW + 2)  # b applied update 1
    genuine = a.outbox.since(0)[0]
    forged = bytearray(genuine)
    forged[60] ^= 1  # a byte of the header; the signature (the last 64 bytes) is the remembered one
    to_epoch, ticket = a.held_tickets.take(b.identity.public_key)
    control = a._control_frame(b.identity.public_key, NOW + 3, to_epoch=to_epoch, ticket=ticket,
                               reply=a.tickets.issue(b.identity.public_key), offer=a.tickets.issue(b.identity.public_key),
                               frames=[bytes(forged)])
    copy = b.neighbours[a.identity.public_key].copy.x_hat.clone()
    _, result = b.handle_request(pack_bundle([control, bytes(forged)]), NOW + 3)
    assert result.accepted and result.refused == 1
    assert b.metrics.get("frames_refused_total", reason="bad_signature") == 1
    assert b.metrics.get("updates_duplicate_total") == 0
    assert torch.equal(b.neighbours[a.identity.public_key].copy.x_hat, copy)
