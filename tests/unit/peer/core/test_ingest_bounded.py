"""What one exchange bundle can make a node decode: the checks that need no decoding (the ticket,
the binding, the signer named in each frame's prefix, repeats) come first, and at most a gap
fill's worth of frames is decoded; every other frame is refused and counted. Honest bundles,
updates or a snapshot, still apply."""

from __future__ import annotations

import pytest
import torch

import protocol.frame
from peer.core.gossip_config import GossipConfig
from peer.core.ingest import MAX_GAP_UPDATES
from peer.core.node import GossipNode
from peer.metrics import Metrics
from protocol import (FrameKind, Identity, RefusalReason, make_control_frame, make_update_frame, pack_bundle,
                      unpack_bundle)
from tests.unit.exchange_helpers import exchange, push

N = 16384
NOW = 1_000_000.0
CFG = GossipConfig(swarm="t", gossip_every=1, compression="topk:0.01+int8", staleness="constant")
X = torch.linspace(-1.0, 1.0, N)
REASONS = [r.value for r in RefusalReason]
COPIES = 4000
"""Frames after the control frame in a hostile bundle: as many as fit the receiver's bundle limit."""


def node(i: int) -> GossipNode:
    return GossipNode(CFG, Identity.generate(bytes([i + 1]) * 32), {"w": ((N,), "float32")}, X, now=NOW,
                      metrics=Metrics())


def key(n: GossipNode) -> bytes:
    return n.identity.public_key


def tiny_update(signer: GossipNode, seq: int = 1) -> bytes:
    """The attack's frame: one kept entry (a few hundred bytes) that decodes to the whole model."""
    delta = torch.zeros(N)
    delta[seq % N] = 1e-3
    return make_update_frame(signer.identity, swarm="t", fingerprint=signer.fingerprint, seq=seq, step=0,
                             timestamp=NOW, codec="topk:0.000000001", delta=delta, extra={"epoch": signer.epoch})[0]


def ticketed(a: GossipNode, b: GossipNode, frames: list[bytes], *, bind: bool = True) -> bytes:
    """A request from `a` spending the ticket `b` gave it, its control frame binding `frames`."""
    to_epoch, ticket = a.held_tickets.take(key(b))
    assert ticket, "a holds no ticket of b's"
    control = a._control_frame(key(b), NOW, to_epoch=to_epoch, ticket=ticket, reply=a.tickets.issue(key(b)),
                               offer=a.tickets.issue(key(b)), frames=frames if bind else [])
    return pack_bundle([control] + frames)


class Work:
    """How many frames had their signature checked, and how many payloads were decompressed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.signatures = self.payloads = 0
        verify, unpack = protocol.frame.verify_signature, protocol.frame.unpack_payload

        def counted_verify(*args, **kwargs):
            self.signatures += 1
            return verify(*args, **kwargs)

        def counted_unpack(*args, **kwargs):
            self.payloads += 1
            return unpack(*args, **kwargs)

        monkeypatch.setattr(protocol.frame, "verify_signature", counted_verify)
        monkeypatch.setattr(protocol.frame, "unpack_payload", counted_unpack)


def refused_total(n: GossipNode) -> float:
    return sum(n.metrics.get("frames_refused_total", reason=r) for r in REASONS + ["duplicate_frame"])


def test_a_first_contact_pushing_4000_frames_has_none_of_them_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = node(0), node(1)
    first_contact = unpack_bundle(a.build_request(None, NOW), a.limits)[0]
    body = pack_bundle([first_contact] + [tiny_update(a)] * COPIES)
    work = Work(monkeypatch)
    _, result = b.handle_request(body, NOW)
    assert (result.accepted, result.frames_in, result.refused) == (False, 1 + COPIES, COPIES)
    assert (work.signatures, work.payloads) == (1, 1)  # the control frame alone
    assert b.metrics.get("frames_refused_total", reason="no_ticket") == 1  # once for the whole push
    assert key(a) not in b.neighbours


def test_a_ticketed_bundle_of_4000_copies_of_one_frame_decodes_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = node(0), node(1)
    push(a, b, NOW)  # b holds a's copy (to which the update applies) and a a ticket of b's
    body = ticketed(a, b, [tiny_update(a)] * COPIES)
    work = Work(monkeypatch)
    _, result = b.handle_request(body, NOW)
    assert result.accepted and result.refused == COPIES - 1
    assert (work.signatures, work.payloads) == (2, 2)  # the control frame and the update, once
    assert b.metrics.get("frames_refused_total", reason="duplicate_frame") == COPIES - 1
    assert refused_total(b) == COPIES - 1


def test_at_most_a_gap_fill_of_distinct_frames_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = node(0), node(1)
    push(a, b, NOW)
    frames = [tiny_update(a, seq) for seq in range(1, COPIES + 1)]  # each a valid update, in order
    body = ticketed(a, b, frames)
    work = Work(monkeypatch)
    _, result = b.handle_request(body, NOW)
    assert result.accepted and result.refused == COPIES - MAX_GAP_UPDATES
    assert work.payloads == 1 + MAX_GAP_UPDATES
    assert b.metrics.get("frames_refused_total", reason="too_large") == COPIES - MAX_GAP_UPDATES
    assert refused_total(b) == COPIES - MAX_GAP_UPDATES


def test_frames_another_key_signed_are_refused_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = node(0), node(1), node(2)
    exchange(a, b, NOW)
    body = ticketed(a, b, [tiny_update(c, seq) for seq in range(1, 101)])
    work = Work(monkeypatch)
    _, result = b.handle_request(body, NOW)
    assert result.accepted and result.refused == 100
    assert (work.signatures, work.payloads) == (1, 1)
    assert b.metrics.get("frames_refused_total", reason="bad_header") == 100
    assert b.neighbours[key(a)].copy.x_hat is None


def test_frames_the_control_frame_does_not_bind_are_refused_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = node(0), node(1)
    exchange(a, b, NOW)
    body = ticketed(a, b, [tiny_update(a, seq) for seq in range(1, 101)], bind=False)
    work = Work(monkeypatch)
    _, result = b.handle_request(body, NOW)
    assert result.accepted and result.refused == 100
    assert (work.signatures, work.payloads) == (1, 1)
    assert b.metrics.get("frames_refused_total", reason="unbound_frame") == 100


def test_an_honest_gap_fill_applies_and_a_longer_gap_gets_a_snapshot() -> None:
    a, b = node(0), node(1)
    push(a, b, NOW)  # b holds a's public copy (a snapshot)
    exchange(a, b, NOW)  # ... and a learns that b holds it
    for step in range(1, MAX_GAP_UPDATES + 1):
        a.publish(X + 0.01 * step, step, NOW)
    result = exchange(a, b, NOW)
    assert result.accepted and (result.frames_in, result.refused) == (1 + MAX_GAP_UPDATES, 0)
    assert b.metrics.get("updates_applied_total") == MAX_GAP_UPDATES
    assert torch.equal(b.neighbours[key(a)].copy.x_hat, a.public.x_hat)
    sent = a.metrics.get("snapshots_sent_total")
    for step in range(MAX_GAP_UPDATES + 1, 2 * MAX_GAP_UPDATES + 2):  # one update more than a gap fill carries
        a.publish(X - 0.01 * step, step, NOW)
    result = exchange(a, b, NOW)
    assert result.accepted and (result.frames_in, result.refused) == (2, 0)
    assert a.metrics.get("snapshots_sent_total") == sent + 1
    assert torch.equal(b.neighbours[key(a)].copy.x_hat, a.public.x_hat)


@pytest.mark.parametrize("kind", [FrameKind.ACK, FrameKind.HELLO])
def test_a_bound_frame_without_tensors_is_refused_and_counted(kind: FrameKind) -> None:
    a, b = node(0), node(1)
    exchange(a, b, NOW)
    empty = make_control_frame(a.identity, kind=kind, swarm="t", fingerprint=a.fingerprint, seq=99, step=0,
                               timestamp=NOW, extra={"epoch": a.epoch})
    _, result = b.handle_request(ticketed(a, b, [empty]), NOW)
    assert result.accepted and result.refused == 1
    assert b.metrics.get("frames_refused_total", reason="bad_header") == 1
    assert b.neighbours[key(a)].copy.x_hat is None


@pytest.mark.parametrize("codec", ["topk:0.01+fp32", "identity"])
def test_finite_updates_whose_sum_overflows_reset_the_copy_and_are_counted(codec: str) -> None:
    """Each frame is finite, so decoding accepts it; two of them at the same entry overflow float32
    in the receiver's copy. Whether added by its kept entries (top-k) or whole (identity), the
    copy is dropped rather than mixed, and counted."""
    a, b = node(0), node(1)
    push(a, b, NOW)  # b holds a's public copy
    exchange(a, b, NOW)
    delta = torch.zeros(N)
    delta[7] = 3e38
    frames = [make_update_frame(a.identity, swarm="t", fingerprint=a.fingerprint, seq=a.public.seq + i, step=i,
                                timestamp=NOW, codec=codec, delta=delta, extra={"epoch": a.epoch})[0] for i in (1, 2)]
    _, result = b.handle_request(ticketed(a, b, frames), NOW)
    assert result.accepted and result.refused == 0
    assert b.metrics.get("updates_applied_total") == 2
    assert b.metrics.get("copies_reset_total") == 1
    assert b.neighbours[key(a)].copy.x_hat is None
