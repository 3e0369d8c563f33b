"""A joiner makes first contact with the peer whose state it fetches while the state is on its way,
and pulls as soon as the state is adopted: its first exchange after adopting carries frames both
ways and brings updates, not a snapshot (`Session.joined`, `peer.core.state_seed`)."""

from __future__ import annotations

import random

import torch

from peer.core.actions import Adopt, Exchange, FetchState, SendHello
from peer.core.config import SessionConfig
from peer.core.session import Session
from protocol import unpack_bundle, Limits
from tests.unit.peer.core.test_session import ME, addr, hello, of
from tests.unit.peer.core.test_state_seed import DIM, NOW, count, joined, node, run_source


def joining_session() -> tuple[Session, FetchState, list]:
    s = Session(SessionConfig(join=True), peer_id=ME, rng=random.Random(0))
    start = s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0)
    out = s.hello_done(of(start, SendHello)[0].token, 0.1, hello=hello(addr(1), step=500))
    return s, of(out, FetchState)[0], out


def test_the_state_fetch_goes_out_with_a_first_contact_to_the_same_peer():
    s, fetch, out = joining_session()
    assert fetch.address == addr(1)
    contact = of(out, Exchange)
    assert [e.address for e in contact] == [addr(1)] and s.in_flight == {contact[0].token: addr(1)}
    assert not s.accepting  # inbound exchanges still wait for the join
    s.exchange_done(contact[0].token, 0.2, peer_id="01" * 32, rtt=0.1, carried=0, owed=False)
    assert s.in_flight == {} and s.partners == []  # a contact is no partner's scored answer


def test_after_the_adopted_state_is_in_place_it_pulls_at_once_and_only_then():
    s, fetch, _ = joining_session()
    done = s.state_done(fetch.token, 0.5, step=500)
    assert of(done, Adopt) and not [e for e in of(done, Exchange) if e.token not in s.in_flight]
    for token in list(s.in_flight):
        s.exchange_done(token, 0.6, peer_id="01" * 32, rtt=0.1)
    pulls = s.joined(0.7)
    assert [e.address for e in pulls] == [addr(1)]
    assert s.joined(0.8) == []  # once


def test_control_no_adoption_no_pull_at_join():
    s = Session(SessionConfig(join=True, join_wait_s=2.0), peer_id=ME, rng=random.Random(0))
    s.start(0.0, listen="", bootstrap=[], step=0, hello_seq_base=0)
    s.tick(2.0)
    assert s.accepting and s.joined(2.1) == []


def test_contact_while_fetching_then_one_exchange_after_adopting_brings_updates_both_ways():
    source = run_source()
    joiner = node(1, torch.zeros(DIM))
    key = source.identity.public_key
    contact = joiner.build_request(None, NOW)  # a fresh process holds no ticket: a control frame alone
    assert len(unpack_bundle(contact, Limits())) == 1
    reply, result = source.handle_request(contact, NOW, verified={joiner.identity.public_key})
    joiner.handle_response(reply, NOW)
    assert not result.accepted and count(source, "snapshots_sent_total") == 0
    joined(source, joiner)
    source.publish(source.public.x_hat.float() + 1e-3, 10, NOW + 10)  # the source moved on meanwhile
    reply, result = source.handle_request(joiner.build_request(key, NOW + 10), NOW + 10,
                                          verified={joiner.identity.public_key})
    joiner.handle_response(reply, NOW + 10)
    assert result.accepted and count(source, "snapshots_received_total") == 1  # it holds our copy now
    assert count(joiner, "snapshots_received_total") == 0 and count(joiner, "updates_applied_total") == 1
    copy = joiner.neighbours[key]
    assert torch.equal(copy.copy.x_hat.view(torch.int16), source.public.x_hat.view(torch.int16))
    assert copy.pulled == copy.version > 0  # ours to mix at the next boundary


def test_control_without_the_contact_the_first_exchange_after_adopting_carries_no_frames():
    source = run_source()
    joiner = node(1, torch.zeros(DIM))
    joined(source, joiner)
    request = joiner.build_request(source.identity.public_key, NOW + 10)
    assert len(unpack_bundle(request, Limits())) == 1  # no ticket yet: it only fetches one


def partnerless_with_verified(address: str) -> Session:
    s = Session(SessionConfig(join=False), peer_id=ME, rng=random.Random(0))
    start = s.start(0.0, listen="", bootstrap=[], step=0, hello_seq_base=0)
    assert start == []
    out = s.inbound_exchange(address, hello(address).peer_id, 0.1)  # heard of: dialled to verify it
    s.hello_done(of(out, SendHello)[0].token, 0.2, hello=hello(address))
    return s


def test_a_peer_with_no_partner_pulls_a_verified_peer_that_brings_news_at_once():
    s = partnerless_with_verified(addr(1))
    pulls = of(s.inbound_exchange(addr(1), hello(addr(1)).peer_id, 0.3, carried=1), Exchange)
    assert [e.address for e in pulls] == [addr(1)] and s.partners == [addr(1)]
    # with a partner, news waits for our next publish as before
    assert of(s.inbound_exchange(addr(1), hello(addr(1)).peer_id, 0.4, carried=1), Exchange) == []


def test_control_no_news_or_an_unverified_pusher_is_not_pulled_early():
    s = partnerless_with_verified(addr(1))
    assert of(s.inbound_exchange(addr(1), hello(addr(1)).peer_id, 0.3, carried=0), Exchange) == []
    stranger = Session(SessionConfig(join=False), peer_id=ME, rng=random.Random(0))
    stranger.start(0.0, listen="", bootstrap=[], step=0, hello_seq_base=0)
    assert of(stranger.inbound_exchange(addr(2), hello(addr(2)).peer_id, 0.3, carried=1), Exchange) == []
