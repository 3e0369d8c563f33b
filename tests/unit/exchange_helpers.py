"""Exchanges between in-process nodes as a driver performs them (tests of the peer core)."""

from __future__ import annotations

from peer.core.node import ExchangeResult, GossipNode


def exchange(a: GossipNode, b: GossipNode, now: float) -> ExchangeResult:
    """`a` asks `b` and ingests the answer; returns what `b` made of the request. Like a driver,
    `a` names `b`'s key once it has heard from `b`."""
    key = b.identity.public_key
    known = key in a.neighbours or a.held_tickets.get(key)[1] > 0
    reply, result = b.handle_request(a.build_request(key if known else None, now), now,
                                     verified={a.identity.public_key})  # b's session verified a's address
    a.handle_response(reply, now)
    return result


def push(a: GossipNode, b: GossipNode, now: float) -> ExchangeResult:
    """`a` delivers what `b` lacks of it: after a first contact when `a` holds no ticket of `b`'s
    (a request without one is answered with one, and applied not at all)."""
    if not a.held_tickets.get(b.identity.public_key)[1]:
        exchange(a, b, now)
    result = exchange(a, b, now)
    assert result.accepted, "a request with a fresh ticket was refused"
    return result
