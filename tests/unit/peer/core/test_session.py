"""The session's decisions, driven by scripted events and a fake clock (no I/O, no threads)."""

from __future__ import annotations

import random

import pytest

from peer.core.actions import Adopt, Count, Exchange, FetchState, Forget, JoinDone, Log, Publish, SendHello
from peer.core.addresses import PeerInfo
from peer.core.config import SessionConfig
from peer.core.hello import Hello
from peer.core.session import Session

ME = "aa" * 32
IDS = {f"10.0.0.{i}:7000": f"{i:02x}" * 32 for i in range(1, 20)}


def addr(i: int) -> str:
    return f"10.0.0.{i}:7000"


def session(**cfg) -> Session:
    """One pull per publish unless a test asks for more: slot rules are easiest read one at a time."""
    return Session(SessionConfig(**{"join": False, "pulls_per_publish": 1, **cfg}), peer_id=ME, rng=random.Random(0))


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def hello(address: str, step: int = 0, peers: tuple[PeerInfo, ...] = ()) -> Hello:
    return Hello(IDS[address], step, address, peers)


def verify_all(s: Session, actions, now: float, step: int = 0) -> list:
    """Answer every pending hello as its peer would; returns what the session did next."""
    out = []
    for h in of(actions, SendHello):
        out += s.hello_done(h.token, now, hello=hello(h.address, step))
    return out


def test_bootstrap_addresses_are_dialled_and_become_partners_once_verified():
    s = session()
    out = s.start(0.0, listen="10.0.0.99:7000", bootstrap=[addr(1), addr(2), addr(1)], step=0, hello_seq_base=5)
    assert sorted(h.address for h in of(out, SendHello)) == [addr(1), addr(2)]  # duplicates folded
    assert of(s.step_boundary(4, True, 0.5), Exchange) == []  # nobody verified yet: no snapshot to strangers
    verify_all(s, out, 0.6)
    ex = of(s.step_boundary(8, True, 1.0), Exchange)
    assert len(ex) == 1 and ex[0].address in (addr(1), addr(2)) and ex[0].peer_id == IDS[ex[0].address]
    assert s.next_hello_seq() == 6


def test_in_flight_limit_and_never_two_exchanges_with_one_neighbour():
    s = session(max_in_flight=2)
    verify_all(s, s.start(0.0, listen="", bootstrap=[addr(1), addr(2), addr(3)], step=0, hello_seq_base=0), 0.1)
    first = s.step_boundary(1, True, 1.0)
    second = s.step_boundary(2, True, 1.5)
    third = s.step_boundary(3, True, 2.0)
    assert of(first, Publish) and of(second, Publish) and of(third, Publish)  # publishing never waits
    busy = of(first, Exchange) + of(second, Exchange)
    assert len(busy) == 2 and busy[0].address != busy[1].address
    assert of(third, Exchange) == []  # both slots taken
    s.exchange_done(busy[0].token, 4.0, peer_id=IDS[busy[0].address], rtt=0.1)
    again = of(s.step_boundary(4, True, 4.5), Exchange)
    assert len(again) == 1 and again[0].address != busy[1].address
    assert s.step_boundary(5, False, 5.0) == []  # no publish due: nothing at all


def test_a_stalled_exchange_frees_its_slot_and_a_failed_partner_is_replaced():
    """Behind a partition both slots would wait out the 30 s timeout; stalled ones stop counting."""
    s = session(max_in_flight=1, max_partners=2, stall_min_s=2.0, stall_rtt_factor=4.0)
    verify_all(s, s.start(0.0, listen="", bootstrap=[addr(i) for i in range(1, 6)], step=0, hello_seq_base=0), 0.1)
    done = of(s.step_boundary(1, True, 1.0), Exchange)[0]
    s.exchange_done(done.token, 1.8, peer_id=IDS[done.address], rtt=0.8)  # smoothed round trip 0.8 s
    cut = of(s.step_boundary(2, True, 2.0), Exchange)[0]  # this one never comes back
    assert of(s.step_boundary(3, True, 4.0), Exchange) == []  # 2 s < 4 x 0.8 s: still holds the slot
    assert s.stalled(5.3) == [cut.token]
    other = of(s.step_boundary(4, True, 5.3), Exchange)
    assert len(other) == 1 and other[0].address != cut.address  # never two with one neighbour
    assert of(s.step_boundary(5, True, 5.4), Exchange) == []  # one active, one stalled: full
    s.exchange_done(other[0].token, 5.5, peer_id=IDS[other[0].address], rtt=0.2)
    late = of(s.step_boundary(6, True, 9.0), Exchange)  # one stalled, none active: a slot
    assert [e.address for e in late] == [other[0].address]
    assert of(s.step_boundary(7, True, 14.0), Exchange) == []  # max_partners open (the cap): nothing more opens
    s.exchange_done(cut.token, 32.0, error="timeout")
    assert cut.address not in s.partners  # replaced, by a peer with no failure
    nxt = of(s.step_boundary(8, True, 32.5), Exchange)
    assert len(nxt) == 1 and nxt[0].address != cut.address and s.table.health(nxt[0].address).failures == 0


def test_failed_publish_is_counted_logged_and_survived():
    s = session()
    assert s.publish_done(8, 1.0) == []
    out = s.publish_done(8, 1.0, error="parameters at step 8 are not finite")
    assert Count("publish_failures_total") in out and of(out, Log)[0].level == "error"
    assert of(s.step_boundary(12, True, 2.0), Publish)  # the peer goes on publishing


def test_eviction_after_failures_forgets_the_neighbour_but_keeps_bootstrap_peers():
    s = session(max_failures=2, evict_every_s=1.0)
    start = s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0)
    verify_all(s, start, 0.1)
    verify_all(s, s.found(PeerInfo(peer_id="", address=addr(2), source="mdns"), 0.2), 0.3)
    assert {p.address for p in s.table.live()} == {addr(1), addr(2)}
    for t in (1.0, 2.0):
        for ex in of(s.step_boundary(int(t), True, t), Exchange):
            s.exchange_done(ex.token, t + 0.5, error="timeout")
    s.exchange_done(999, 3.0, error="timeout")  # an unknown token changes nothing
    out = []
    for a in (addr(1), addr(2)):
        s.table.mark_failure(a, 3.0)
        s.table.mark_failure(a, 3.0)
    out = s.tick(3.0)
    assert of(out, Forget) == [Forget(IDS[addr(2)], addr(2))]  # the mDNS one goes
    assert Count("evictions_total") in out
    assert addr(1) in s.table and s.table.health(addr(1)).dead  # the bootstrap one stays, dead


def test_evicting_a_peer_whose_key_was_never_learnt_forgets_nothing():
    """The node holds nothing of a peer it never heard from: no `Forget` for a driver to skip."""
    s = session(max_failures=2, evict_every_s=1.0)
    s.start(0.0, listen="", bootstrap=[], step=0, hello_seq_base=0)
    for h in of(s.found(PeerInfo(peer_id="", address=addr(2), source="mdns"), 0.2), SendHello):
        s.hello_done(h.token, 0.3, error="connection refused")
    s.table.mark_failure(addr(2), 3.0)
    s.table.mark_failure(addr(2), 3.0)
    out = s.tick(3.0)
    assert Count("evictions_total") in out and addr(2) not in s.table
    assert of(out, Forget) == []


def test_dead_bootstrap_address_is_redialled_with_exponential_backoff():
    s = session(max_failures=1, evict_every_s=1.0, bootstrap_retry_min_s=5.0, bootstrap_retry_max_s=20.0,
                hello_every_s=1e6)
    first = of(s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0), SendHello)
    s.hello_done(first[0].token, 0.5, error="connection refused")
    dials = []
    t = 1.0
    while t < 80.0:
        for h in of(s.tick(t), SendHello):
            dials.append(t)
            s.hello_done(h.token, t + 0.1, error="connection refused")
        t = round(t + 0.5, 3)
    gaps = [b - a for a, b in zip(dials, dials[1:])]
    assert dials[0] == pytest.approx(6.0, abs=0.6)  # first retry after bootstrap_retry_min_s
    assert gaps[:2] == pytest.approx([10.0, 20.0], abs=0.6) and max(gaps) <= 20.5  # doubling, capped
    # it answers at last: back among the live, retries stop
    h = of(s.tick(dials[-1] + 20.0), SendHello)
    assert h, "due for another retry"
    s.hello_done(h[0].token, dials[-1] + 20.1, hello=hello(addr(1)))
    assert [p.address for p in s.table.live()] == [addr(1)]
    assert not of(s.tick(dials[-1] + 100.0), SendHello) or s.cfg.hello_every_s < 100


def test_peer_exchange_admits_heard_of_peers_only_after_dialling_them():
    s = session()
    start = s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0)
    told = (PeerInfo(peer_id=IDS[addr(2)], address=addr(2), source="exchange"),
            PeerInfo(peer_id=ME, address="10.0.0.50:7000", source="exchange"))  # ourselves: ignored
    out = s.hello_done(of(start, SendHello)[0].token, 0.2, hello=hello(addr(1), peers=told))
    assert [h.address for h in of(out, SendHello)] == [addr(2)]  # heard of: dialled, not trusted
    for _ in range(20):  # until verified, it is never an exchange partner
        for ex in of(s.step_boundary(1, True, 1.0), Exchange):
            assert ex.address == addr(1)
            s.exchange_done(ex.token, 1.1, peer_id=IDS[addr(1)])
    s.hello_done(of(out, SendHello)[0].token, 2.0, hello=hello(addr(2)))
    seen = set()
    for _ in range(20):
        for ex in of(s.step_boundary(1, True, 3.0), Exchange):
            seen.add(ex.address)
            s.exchange_done(ex.token, 3.1, peer_id=IDS[ex.address])
    assert seen == {addr(1), addr(2)}
    # an inbound exchange names a listen address: a candidate that we dial back
    back = s.inbound_exchange(addr(3), IDS[addr(3)], 4.0)
    assert [h.address for h in of(back, SendHello)] == [addr(3)]
    assert s.inbound_exchange("not an address", IDS[addr(4)], 4.0) == [Count("inbound_bad_listen_total")]


def test_join_asks_every_known_peer_fetches_the_furthest_and_falls_back():
    s = Session(SessionConfig(join=True), peer_id=ME, rng=random.Random(0))
    start = s.start(0.0, listen="", bootstrap=[addr(1), addr(2), addr(3)], step=10, hello_seq_base=0)
    assert not s.accepting
    asked = {h.address: h.token for h in of(start, SendHello)}
    assert set(asked) == {addr(1), addr(2), addr(3)}
    assert s.hello_done(asked[addr(1)], 0.1, hello=hello(addr(1), step=500)) == []  # waits for all
    assert not of(s.hello_done(asked[addr(2)], 0.2, hello=hello(addr(2), step=9000)), FetchState)
    fetch = of(s.hello_done(asked[addr(3)], 0.3, error="timeout"), FetchState)
    assert [f.address for f in fetch] == [addr(2)]  # the furthest along
    again = of(s.state_done(fetch[0].token, 0.4, error="refused: bad_signature"), FetchState)
    assert [f.address for f in again] == [addr(1)]  # falls back to the next one ahead of us
    done = s.state_done(again[0].token, 0.5, step=500)
    assert of(done, Adopt) == [Adopt(again[0].token, addr(1), 500)] and of(done, JoinDone) == [JoinDone(addr(1))]
    assert s.accepting and s.step == 500


def test_join_adopts_nothing_that_is_not_ahead_and_gives_up_in_time():
    s = Session(SessionConfig(join=True), peer_id=ME, rng=random.Random(0))
    start = s.start(0.0, listen="", bootstrap=[addr(1)], step=700, hello_seq_base=0)
    out = s.hello_done(of(start, SendHello)[0].token, 0.1, hello=hello(addr(1), step=600))
    assert of(out, JoinDone) == [JoinDone(None)] and not of(out, FetchState)
    lonely = Session(SessionConfig(join=True, join_wait_s=2.0), peer_id=ME, rng=random.Random(0))
    assert lonely.start(0.0, listen="", bootstrap=[], step=0, hello_seq_base=0) == []
    assert not lonely.accepting and not of(lonely.tick(1.0), JoinDone)
    assert of(lonely.tick(2.0), JoinDone) == [JoinDone(None)] and lonely.accepting


def test_join_keeps_asking_while_nobody_answers_until_its_timeout():
    s = Session(SessionConfig(join=True, join_timeout_s=5.0), peer_id=ME, rng=random.Random(0))
    pending = of(s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0), SendHello)
    t, asks = 0.0, 0
    while not s.accepting and t < 10.0:
        for h in pending:
            asks += 1
            s.hello_done(h.token, t, error="timeout")
        t += 0.5
        pending = of(s.tick(t), SendHello)
    assert s.accepting and 5.0 <= t <= 6.0 and asks >= 3


def test_a_claimed_step_buys_nothing_when_the_state_scores_worse():
    s = Session(SessionConfig(join=True), peer_id=ME, rng=random.Random(0))
    asked = {h.address: h.token for h in of(s.start(0.0, listen="", bootstrap=[addr(1), addr(2)], step=5,
                                                     hello_seq_base=0), SendHello)}
    s.hello_done(asked[addr(1)], 0.1, hello=hello(addr(1), step=10**9))  # the liar
    fetch = of(s.hello_done(asked[addr(2)], 0.2, hello=hello(addr(2), step=40)), FetchState)
    assert [f.address for f in fetch] == [addr(1)]  # the biggest claim is tried first...
    out = s.state_done(fetch[0].token, 0.3, step=10**9, better=False)
    assert Count("joins_refused_total") in out and not of(out, Adopt)  # ...and refused on our probe batch
    nxt = of(out, FetchState)
    assert [f.address for f in nxt] == [addr(2)]
    done = s.state_done(nxt[0].token, 0.4, step=40, better=True)
    assert of(done, Adopt) == [Adopt(nxt[0].token, addr(2), 40)] and s.step == 40


def test_a_partner_that_failed_is_probed_until_it_answers_or_is_evicted():
    """A failed partner leaves the partner set; hellos decide whether it is dead (its copy freed)."""
    s = session(max_failures=3, evict_every_s=1.0)
    verify_all(s, s.start(0.0, listen="", bootstrap=[], step=0, hello_seq_base=0), 0.0)
    for i in (1, 2):
        verify_all(s, s.found(PeerInfo(peer_id="", address=addr(i), source="mdns"), 0.1), 0.2)
    ex = of(s.step_boundary(1, True, 1.0), Exchange)[0]
    probe = of(s.exchange_done(ex.token, 6.0, error="timeout"), SendHello)
    assert [h.address for h in probe] == [ex.address] and ex.address not in s.partners
    again = of(s.hello_done(probe[0].token, 11.0, error="timeout"), SendHello)
    assert [h.address for h in again] == [ex.address]
    assert of(s.hello_done(again[0].token, 16.0, error="timeout"), SendHello) == []  # third failure: dead
    t17 = s.tick(17.0)
    assert [f.address for f in of(t17, Forget)] == [ex.address]
    verify_all(s, t17, 17.5)  # the hello cadence may have dialled the other peer meanwhile
    other = addr(1) if ex.address == addr(2) else addr(2)  # a peer that answers the probe stays
    ex2 = of(s.step_boundary(2, True, 18.0), Exchange)[0]
    assert ex2.address == other
    probe2 = of(s.exchange_done(ex2.token, 20.0, error="reset"), SendHello)[0]
    s.hello_done(probe2.token, 20.1, hello=hello(other))
    assert s.table.health(other).failures == 0 and of(s.tick(21.0), Forget) == []


def test_partners_are_distinct_when_vacancies_are_filled_from_both_pools():
    s = session(max_partners=8)
    verify_all(s, s.start(0.0, listen="", bootstrap=[addr(i) for i in range(1, 5)], step=0, hello_seq_base=0), 0.1)
    s.table.mark_failure(addr(1), 0.2)  # verified, but its last request failed: the second pool
    s.step_boundary(1, True, 1.0)
    assert sorted(s.partners) == [addr(i) for i in range(1, 5)]


def test_each_publish_pulls_several_partners_each_another_one():
    s = session(pulls_per_publish=3, max_in_flight=4)
    verify_all(s, s.start(0.0, listen=addr(0), bootstrap=[addr(i) for i in (1, 2, 3, 4)], step=0, hello_seq_base=0), 0.1)
    first = of(s.step_boundary(1, True, 0.5), Exchange)
    assert len(first) == 3 and len({e.address for e in first}) == 3
    second = of(s.step_boundary(2, True, 0.6), Exchange)  # one slot left of four, one partner not busy
    assert len(second) == 1 and second[0].address not in {e.address for e in first}
    assert of(s.step_boundary(3, False, 0.7), Exchange) == []  # no publish, no pull


@pytest.mark.parametrize("bad", [dict(pulls_per_publish=0), dict(pulls_per_publish=3, max_in_flight=2),
                                 dict(pulls_per_publish=3, max_partners=2)])
def test_more_pulls_than_slots_or_partners_is_refused(bad):
    with pytest.raises(ValueError, match="pulls_per_publish"):
        SessionConfig(**bad)


def test_pulls_left_unset_follow_partner_steps_and_a_set_count_stays():
    """Each pull brings a partner's batch where partner steps are taken: 4 there, 2 where a pull
    only mixes; never more than the slots and partners allow; a count the user set is kept."""
    unset = SessionConfig()
    assert unset.pulls_per_publish is None and unset.pulls == 2  # read before anyone decided
    assert unset.for_partner_steps(True).pulls_per_publish == 4
    assert unset.for_partner_steps(False).pulls_per_publish == 2
    assert SessionConfig(max_in_flight=3).for_partner_steps(True).pulls_per_publish == 3
    assert SessionConfig(pulls_per_publish=1).for_partner_steps(True).pulls_per_publish == 1


def test_a_refused_bootstrap_address_is_named_once_with_its_reason_and_in_the_join_verdict():
    s = Session(SessionConfig(join=True, join_wait_s=1.0, join_timeout_s=5.0), peer_id=ME, rng=random.Random(0))
    start = s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0)
    assert "not yet contacted" in of(start, Log)[0].message  # "found" would claim it answered
    first = of(start, SendHello)[0]
    warned = [a for a in of(s.hello_done(first.token, 0.1, error="connection refused"), Log) if a.level == "warning"]
    assert len(warned) == 1 and addr(1) in warned[0].message and "connection refused" in warned[0].message
    again = [h for t in (1.2, 2.4, 3.6) for h in of(s.tick(t), SendHello)]
    for h in again:
        assert not [a for a in of(s.hello_done(h.token, h.token + 0.1, error="connection refused"), Log)
                    if a.level == "warning"]  # said once, not at every retry
    verdict = [a.message for t in (5.5, 6.0) for a in of(s.tick(t), Log) if "joining" in a.message]
    assert verdict and f"{addr(1)}: connection refused" in verdict[0], verdict


def test_a_failing_address_learned_by_exchange_is_not_reported_as_a_bootstrap_failure():
    s = session()
    verify_all(s, s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0), 0.1)
    learned = s.found(PeerInfo(peer_id=IDS[addr(2)], address=addr(2), source="exchange"), 0.2)
    dial = [h for h in of(learned, SendHello) if h.address == addr(2)][0]
    assert not [a for a in of(s.hello_done(dial.token, 0.3, error="connection refused"), Log) if a.level == "warning"]


def test_a_retry_due_while_its_hello_is_still_out_does_not_make_the_timer_spin():
    """Packets to a dead `--peer` address vanish: its hello waits the whole request timeout. A
    retry that comes due meanwhile cannot be sent (one dial at a time), so it must not be the
    next deadline either: a driver's timer would fire at once, again and again, until the hello
    times out (simnet's clock would never move on)."""
    s = session(max_failures=1, evict_every_s=1.0, bootstrap_retry_min_s=5.0, hello_every_s=1e6)
    first = of(s.start(0.0, listen="", bootstrap=[addr(1)], step=0, hello_seq_base=0), SendHello)
    s.hello_done(first[0].token, 0.5, error="connection refused")
    t, out = 1.0, []
    while not of(out, SendHello):  # the first retry goes out at bootstrap_retry_min_s, and vanishes
        out, t = s.tick(t), t + 0.5
    ticks_while_out = 0
    now = t
    while now < t + 25.0:  # its answer never comes; the request timeout (30 s) has not passed
        due = s.next_deadline()
        assert due > now, f"the next deadline {due} is not after now ({now}): the timer would spin"
        now = due
        s.tick(now)
        ticks_while_out += 1
    assert ticks_while_out < 100
