"""Candidate slots cannot be held by claims that never answer (`peer.core.candidates`).

An attacker made first contacts claiming addresses that accept a connection and never answer;
each held one of the candidate slots for three request timeouts, and a newcomer that contacted the
victim stayed unverified (so never a partner, and without a snapshot) for as long as the flood
went on. Now a candidate's dial has a short deadline, one host holds a few slots at most (one IPv6
/48 two hosts' worth), hearsay leaves a reserve for mDNS, and a `--peer` address always gets in."""

from __future__ import annotations

import random

import pytest

from peer.core.actions import Count, SendHello
from peer.core.addresses import PeerInfo
from peer.core.config import CandidateConfig, SessionConfig
from peer.core.hello import Hello
from peer.core.session import Session

ME = "aa" * 32
SLOTS = CandidateConfig()


def key(i: int) -> str:
    return f"{i:064x}"


def session() -> Session:
    s = Session(SessionConfig(join=False, max_candidates=16), peer_id=ME, rng=random.Random(0))
    s.start(0.0, listen="10.0.0.99:7000", bootstrap=[], step=0, hello_seq_base=0)
    return s


def dials(actions) -> list[SendHello]:
    return [a for a in actions if isinstance(a, SendHello)]


def refused(actions) -> int:
    return sum(1 for a in actions if isinstance(a, Count) and a.name == "candidates_refused_total")


def flood(s: Session, now: float, hosts: int, per_host: int, base: int = 0) -> list[SendHello]:
    """First contacts claiming `per_host` listen addresses on each of `hosts` hosts: the dials they cause."""
    out = []
    for h in range(hosts):
        for p in range(per_host):
            out += s.inbound_exchange(f"10.6.{h}.6:{7000 + p}", key(base + 1000 + 100 * h + p), now)
    return dials(out)


def unverified(s: Session) -> list[str]:
    return [p.address for p in s.table.live() if s.table.health(p.address).last_success is None]


def test_claims_that_never_answer_lose_their_slots_at_the_dial_deadline() -> None:
    s = session()
    attack = flood(s, 0.0, hosts=16, per_host=1)  # one claim on each of 16 hosts: every slot hearsay may take
    assert len(attack) == len(unverified(s)) == 16 - SLOTS.reserved
    assert refused(s.inbound_exchange("10.0.0.1:7000", key(1), 1.0)) == 1  # a newcomer: no room yet
    assert s.next_deadline() <= SLOTS.dial_deadline_s
    s.tick(SLOTS.dial_deadline_s)  # none of the attacker's addresses answered in time
    assert unverified(s) == []
    newcomer = dials(s.inbound_exchange("10.0.0.1:7000", key(1), SLOTS.dial_deadline_s + 1))
    assert [d.address for d in newcomer] == ["10.0.0.1:7000"]
    s.hello_done(newcomer[0].token, SLOTS.dial_deadline_s + 1.5, hello=Hello(key(1), 0, "10.0.0.1:7000", ()))
    assert bytes.fromhex(key(1)) in s.verified_keys()
    for d in attack:  # answers that come after the deadline change nothing
        assert s.hello_done(d.token, 30.0, hello=Hello(key(0), 0, d.address, ())) == []


def test_one_host_holds_a_few_slots_and_a_newcomer_elsewhere_gets_in_at_once() -> None:
    s = session()
    out = flood(s, 0.0, hosts=1, per_host=20)
    assert len(out) == len(unverified(s)) == SLOTS.per_host
    assert [d.address for d in dials(s.inbound_exchange("10.0.0.1:7000", key(1), 1.0))] == ["10.0.0.1:7000"]


def test_hearsay_leaves_a_reserve_for_mdns_and_a_peer_named_by_the_user_always_gets_in() -> None:
    s = session()
    flood(s, 0.0, hosts=16, per_host=1)
    assert refused(s.found(PeerInfo(peer_id="", address="10.0.0.2:7000", source="exchange"), 1.0)) == 1
    assert dials(s.found(PeerInfo(peer_id="", address="10.0.0.3:7000", source="mdns"), 1.0))
    flood(s, 1.0, hosts=4, per_host=1, base=50)  # more hearsay: the reserve stays for mDNS
    assert len(unverified(s)) == 16 - SLOTS.reserved + 1
    assert dials(s.found(PeerInfo(peer_id="", address="10.0.0.4:7000", source="static"), 1.0))


def test_one_ipv6_host_is_its_whole_slash_64() -> None:
    """One IPv6 host is commonly handed a whole /64: addresses across it count as one host
    (`peer.core.diversity.host_of`), while a /64 next to it is another host."""
    s = session()
    out = []
    for i in range(20):
        out += s.inbound_exchange(f"[2001:db8:0:6::{i + 1:x}]:7000", key(2000 + i), 0.0)
    assert len(dials(out)) == len(unverified(s)) == SLOTS.per_host
    beside = dials(s.inbound_exchange("[2001:db8:0:7::1]:7000", key(1), 1.0))
    assert [d.address for d in beside] == ["[2001:db8:0:7::1]:7000"]


@pytest.mark.parametrize("block, held", [(lambda i: "2001:db8:6", 8), (lambda i: f"2001:db8:{0x100 + i:x}", 12)],
                         ids=["one /48", "control: 20 /48s"])
def test_the_slash_64s_of_one_ipv6_48_hold_its_share_of_the_slots(block, held: int) -> None:
    """20 /64s of one /48 (a site's allocation), each claiming 4 listen addresses, took every slot
    hearsay may take (12): each /64 was a host of its own. Now the /48 holds `per_block` (8), a /64
    of another /48 gets in at once, and 20 /64s in as many /48s still take all 12."""
    s = session()
    out = []
    for i in range(20):
        for p in range(4):
            out += s.inbound_exchange(f"[{block(i)}:{i:x}::{p + 1:x}]:7000", key(3000 + 10 * i + p), 0.0)
    assert len(dials(out)) == len(unverified(s)) == held
    elsewhere = dials(s.inbound_exchange("[2001:db8:ffff:1::1]:7000", key(1), 1.0))
    assert [d.address for d in elsewhere] == (["[2001:db8:ffff:1::1]:7000"] if held < 12 else [])


def test_ipv4_has_no_block_beyond_its_hosts() -> None:
    """A /24 is often unrelated customers behind one provider's NAT: 20 hosts of one /24 still take
    every slot hearsay may take, as 20 hosts anywhere would."""
    s = session()
    out = []
    for h in range(20):
        out += s.inbound_exchange(f"10.6.0.{h + 1}:7000", key(4000 + h), 0.0)
    assert len(dials(out)) == len(unverified(s)) == 16 - SLOTS.reserved
