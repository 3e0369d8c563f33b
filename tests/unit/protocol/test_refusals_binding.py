"""Exchanges bound to their receiver: a recording is refused after a restart, after any number
of other senders, and at any other peer; honest traffic resumes as soon as the sender has a
fresh ticket. The node is the one a real peer and simnet run (no sockets, no threads)."""

from __future__ import annotations

import pytest
import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import ExchangeResult, GossipNode
from peer.metrics import Metrics
from protocol import FrameRefused, Identity, RefusalReason, TicketBook, decode_frame, pack_bundle, unpack_bundle
from tests.unit.exchange_helpers import exchange as exchange_between

R = RefusalReason
N = 16
NOW = 1_000_000.0
CFG = GossipConfig(swarm="t", gossip_every=1, compression="int8", staleness="constant")
X = torch.linspace(-1.0, 1.0, N)


def node(i: int, x: torch.Tensor = X, now: float = NOW) -> GossipNode:
    return GossipNode(CFG, Identity.generate(bytes([i + 1]) * 32), {"w": ((N,), "float32")}, x, now=now,
                      metrics=Metrics())


def restarted(old: GossipNode, now: float) -> GossipNode:
    """The same key in a new process: nothing kept in memory, a new epoch."""
    return GossipNode(CFG, old.identity, {"w": ((N,), "float32")}, old.last_x, now=now, metrics=Metrics())


def key(n: GossipNode) -> bytes:
    return n.identity.public_key


def exchange(a: GossipNode, b: GossipNode, now: float = NOW) -> ExchangeResult:
    return exchange_between(a, b, now)


def refused(n: GossipNode, reason: RefusalReason) -> float:
    return n.metrics.get("frames_refused_total", reason=reason.value)


def flood(b: GossipNode, senders: int) -> None:
    """`senders` first contacts with `b`, each from a fresh key (only `b`'s side is played)."""
    other = node(2)
    for i in range(senders):
        other.identity = Identity.generate(i.to_bytes(4, "big") * 8)
        assert not b.handle_request(other.build_request(None, NOW), NOW)[1].accepted


def recorded_push(a: GossipNode, b: GossipNode) -> bytes:
    """A valid request from `a` that `b` accepts, as an eavesdropper keeps it."""
    exchange(a, b)  # first contact: `a` learns a ticket of `b`'s
    a.publish(X + 0.5, 1, NOW)
    body = a.build_request(key(b), NOW)
    assert b.handle_request(body, NOW)[1].accepted
    assert torch.equal(b.neighbours[key(a)].copy.x_hat, a.public.x_hat)
    return body


def test_a_request_recorded_before_the_receivers_restart_is_refused() -> None:
    a, b = node(0), node(1)
    body = recorded_push(a, b)
    b2 = restarted(b, NOW + 5)
    assert b2.epoch != b.epoch
    reply, result = b2.handle_request(body, NOW + 5)  # inside the clock-skew window
    assert (result.accepted, result.frames_in, result.refused) == (False, 2, 1)
    assert key(a) not in b2.neighbours and b2.view_slot.current.copies == ()
    assert refused(b2, R.STALE_EPOCH) == 1 and R(R.STALE_EPOCH.value) is R.STALE_EPOCH
    assert b2.metrics.get("exchanges_total") == 0
    assert unpack_bundle(reply, b2.limits)  # answered (with a fresh ticket), nothing applied


def test_a_replay_after_4100_other_senders_is_refused() -> None:
    a, b = node(0), node(1)
    body = recorded_push(a, b)
    flood(b, 4100)  # more senders than the 4,096 a per-sender window held
    held = b.neighbours.get(key(a))
    reply, result = b.handle_request(body, NOW + 1)
    assert not result.accepted and refused(b, R.STALE_TICKET) == 1
    assert b.neighbours.get(key(a)) is held  # not re-created, not touched
    assert b.metrics.get("snapshots_received_total") == 1  # only the original push
    assert len(b.tickets._tickets) == 1 << 14  # one fixed ring, whatever the number of senders


def test_a_ticket_pushed_out_of_the_ring_is_refused_then_renewed() -> None:
    a, b = node(0), node(1)
    b.tickets = TicketBook(key(b), b.epoch, window=4096)
    exchange(a, b)  # `a` holds a live, unspent ticket
    flood(b, 4100)  # each answer issues a ticket: `a`'s is overwritten
    assert not exchange(a, b).accepted and refused(b, R.STALE_TICKET) == 1  # refused, never accepted
    assert exchange(a, b).accepted  # the refusal's answer carried a fresh ticket


def test_honest_traffic_resumes_once_the_sender_learns_the_new_epoch() -> None:
    a, b = node(0), node(1)
    exchange(a, b)
    exchange(a, b)
    b2 = restarted(b, NOW + 5)
    first = exchange(a, b2, NOW + 5)
    assert not first.accepted and refused(b2, R.STALE_EPOCH) == 1
    epoch, ticket = a.held_tickets.get(key(b2))
    assert epoch == b2.epoch == a.neighbours[key(b2)].epoch and ticket > 0
    a.publish(X + 0.25, 2, NOW + 6)
    second = exchange(a, b2, NOW + 6)
    assert second.accepted and (second.frames_in, second.refused) == (2, 0)
    assert torch.equal(b2.neighbours[key(a)].copy.x_hat, a.public.x_hat)
    assert refused(b2, R.STALE_EPOCH) == 1 and refused(b2, R.STALE_TICKET) == 0


def test_a_request_for_another_receiver_is_refused() -> None:
    a, b, c = node(0), node(1), node(2)
    exchange(a, c)
    to_c = a.build_request(key(c), NOW)
    with pytest.raises(FrameRefused) as err:
        b.handle_request(to_c, NOW)
    assert err.value.reason is R.WRONG_RECEIVER
    assert key(a) not in b.neighbours
    assert c.handle_request(to_c, NOW)[1].accepted  # where it was meant to go


def test_answers_are_bound_to_the_request_they_answer() -> None:
    a, b, c = node(0), node(1), node(2)
    reply, _ = b.handle_request(a.build_request(None, NOW), NOW)
    a.handle_response(reply, NOW)
    with pytest.raises(FrameRefused) as err:  # the same answer again
        a.handle_response(reply, NOW)
    assert err.value.reason is R.STALE_TICKET
    reply_to_c, _ = b.handle_request(c.build_request(None, NOW), NOW)
    with pytest.raises(FrameRefused) as err:  # an answer meant for another peer
        a.handle_response(reply_to_c, NOW)
    assert err.value.reason is R.WRONG_RECEIVER
    request = unpack_bundle(a.build_request(key(b), NOW), a.limits)[0]
    reply_ticket = decode_frame(request, b.policy, NOW).header.extra["reply"]
    forged = c._control_frame(key(a), NOW, to_epoch=a.epoch, ticket=reply_ticket, reply=0, offer=0, frames=[])
    with pytest.raises(FrameRefused) as err:  # c saw the request to b and answers it itself
        a.handle_response(pack_bundle([forged]), NOW)
    assert err.value.reason is R.STALE_TICKET  # the reply ticket was issued to b's key


def test_frames_not_bound_by_the_control_frame_are_refused() -> None:
    a, b = node(0), node(1)
    exchange(a, b)
    a.publish(X + 0.5, 1, NOW)
    old_snapshot = unpack_bundle(a.build_request(key(b), NOW), a.limits)[1]  # spends the ticket: a gets one more
    exchange(a, b)
    a.publish(X + 0.75, 2, NOW)
    control, *frames = unpack_bundle(a.build_request(key(b), NOW), a.limits)
    result = b.handle_request(pack_bundle([control, *frames, old_snapshot]), NOW)[1]  # one frame slipped in
    assert result.accepted and (result.frames_in, result.refused) == (3, 2)
    assert refused(b, R.UNBOUND_FRAME) == 2 and R(R.UNBOUND_FRAME.value) is R.UNBOUND_FRAME
    assert b.neighbours[key(a)].copy.x_hat is None  # the control frame counts; neither frame was applied


def test_frames_pushed_without_a_ticket_are_refused_and_a_first_contact_is_not() -> None:
    a, b = node(0), node(1)
    first = exchange(a, b)
    assert not first.accepted and b.metrics.get("exchanges_unticketed_total") == 1
    assert refused(b, R.NO_TICKET) == 0
    control = unpack_bundle(node(0).build_request(None, NOW), a.limits)[0]  # a ticket-less control frame...
    a.publish(X + 0.5, 1, NOW)
    snapshot = unpack_bundle(a.build_request(key(b), NOW), a.limits)[1]
    assert not b.handle_request(pack_bundle([control, snapshot]), NOW)[1].accepted  # ...that pushes a frame
    assert refused(b, R.NO_TICKET) == 1 and R(R.NO_TICKET.value) is R.NO_TICKET
    assert key(a) not in b.neighbours


def test_a_refused_control_frame_does_not_spend_its_ticket() -> None:
    a, b = node(0), node(1)
    exchange(a, b)
    held = a.held_tickets.get(key(b))
    with pytest.raises(FrameRefused) as err:
        b.handle_request(a.build_request(key(b), NOW + 1000), NOW)  # outside the clock-skew window
    assert err.value.reason is R.STALE_TIMESTAMP
    a.held_tickets.keep(key(b), *held)
    assert exchange(a, b).accepted


def test_offers_from_unapplied_requests_never_replace_a_held_ticket() -> None:
    a, b = node(0), node(1)
    first_contact = a.build_request(None, NOW)
    exchange(a, b)
    assert b.held_tickets.get(key(a))[1] > 0  # kept from a's first contact: b's first request pushes
    assert exchange(b, a).accepted
    held = b.held_tickets.get(key(a))  # from a's answer
    assert not b.handle_request(first_contact, NOW)[1].accepted  # a recording of the first contact...
    assert b.held_tickets.get(key(a)) == held  # ...does not replace the ticket b holds
    assert exchange(b, a).accepted
