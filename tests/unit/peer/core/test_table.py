import random
from collections import Counter

import pytest

from peer.net.discovery import PeerInfo
from peer.core.table import NeighbourConfig, NeighbourTable

SELF_ID = "f" * 64


def pid(i: int) -> str:
    return f"{i:064x}"


def info(i: int, source: str = "mdns", port: int | None = None, peer_id: str | None = None) -> PeerInfo:
    return PeerInfo(
        peer_id=pid(i) if peer_id is None else peer_id,
        address=f"10.0.0.{i}:{port or 7000}",
        swarm="s",
        fingerprint="fp",
        source=source,
    )


def table(**kw) -> NeighbourTable:
    kw.setdefault("self_peer_id", SELF_ID)
    kw.setdefault("self_addresses", ("127.0.0.1:9999",))
    return NeighbourTable(NeighbourConfig(**kw))


def test_config_is_validated():
    for bad in ({"max_peers": 0}, {"max_failures": 0}, {"timeout_s": 0}, {"rtt_smoothing": 0},
                {"self_peer_id": "xyz"}, {"self_addresses": ("nohost",)}, {"self_addresses": "h:1"}):
        with pytest.raises(ValueError):
            NeighbourConfig(**bad)


def test_dead_after_max_failures_in_a_row_and_a_success_resets_the_count():
    t = table(max_failures=3, timeout_s=1e9)
    p = info(1)
    assert t.add(p, now=0.0)
    assert t.mark_failure(p.address, 1.0) is False
    assert t.mark_failure(p.address, 2.0) is False
    assert t.mark_success(p.address, 3.0)
    assert t.mark_failure(p.address, 4.0) is False
    assert t.mark_failure(p.address, 5.0) is False
    assert t.live() == [p] and t.evict_dead(6.0) == []
    assert t.mark_failure(p.address, 7.0) is True  # third in a row
    assert t.live() == [] and len(t) == 1  # dead, not yet evicted
    assert t.choose(random.Random(0), k=5) == []
    assert t.evict_dead(8.0) == [p]
    assert len(t) == 0 and p.address not in t


def test_dead_after_timeout_since_added_then_since_last_success():
    t = table(timeout_s=10.0)
    a, b = info(1), info(2)
    t.add(a, 0.0)
    t.add(b, 0.0)
    t.mark_success(b.address, 5.0)
    assert t.evict_dead(9.999) == []
    assert t.evict_dead(10.0) == [a]  # never answered: counted from being added
    assert t.evict_dead(14.999) == []
    assert t.evict_dead(15.0) == [b]  # counted from its last success


def test_re_announcing_a_peer_does_not_restart_its_clock():
    t = table(timeout_s=10.0)
    a = info(1)
    t.add(a, 0.0)
    assert t.add(a, 8.0) is False  # nothing new
    assert t.add(info(1, source="exchange"), 9.0) is False
    assert t.evict_dead(10.0) == [a]


def test_choose_is_deterministic_given_the_rng_and_independent_of_insertion_order():
    peers = [info(i) for i in range(1, 9)]
    t1, t2 = table(), table()
    for p in peers:
        t1.add(p, 0.0)
    for p in reversed(peers):
        t2.add(p, 0.0)
    draws1 = [t1.choose(random.Random(42), k=3) for _ in range(3)]
    draws2 = [t2.choose(random.Random(42), k=3) for _ in range(3)]
    assert draws1 == draws2
    rng_a, rng_b = random.Random(7), random.Random(7)
    assert [t1.choose(rng_a)[0] for _ in range(50)] == [t1.choose(rng_b)[0] for _ in range(50)]
    three = t1.choose(random.Random(1), k=3)
    assert len(three) == 3 and len(set(three)) == 3
    assert len(t1.choose(random.Random(1), k=100)) == 8


def test_choose_is_uniform_over_live_peers():
    t = table(max_failures=1)
    peers = [info(i) for i in range(1, 12)]
    for p in peers:
        t.add(p, 0.0)
    dead = peers[-1]
    t.mark_failure(dead.address, 1.0)
    rng = random.Random(1234)
    draws = 22_000
    counts = Counter(t.choose(rng)[0].address for _ in range(draws))
    assert dead.address not in counts
    assert len(counts) == 10
    expected = draws / 10
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 27.88  # 9 degrees of freedom, p = 0.001
    # power check: one peer drawn 15% more often than the others fails the same bound
    biased = dict(counts, **{min(counts): expected * 1.15})
    others = [k for k in biased if k != min(counts)]
    for k in others:
        biased[k] = (draws - biased[min(counts)]) / len(others)
    assert sum((c - expected) ** 2 / expected for c in biased.values()) > 27.88


def test_choose_excludes_by_address_or_peer_id():
    t = table()
    a, b, c = info(1), info(2), info(3)
    for p in (a, b, c):
        t.add(p, 0.0)
    for seed in range(20):
        picked = t.choose(random.Random(seed), k=3, exclude={a.address, b.peer_id})
        assert picked == [c]
    with pytest.raises(ValueError):
        t.choose(random.Random(0), k=-1)


def test_bound_drops_the_least_recently_successful_non_static_peer():
    t = table(max_peers=3)
    a, b, c, d, e = (info(i) for i in range(1, 6))
    for p in (a, b, c):
        t.add(p, 0.0)
    t.mark_success(a.address, 1.0)
    t.mark_success(b.address, 2.0)
    t.mark_success(c.address, 3.0)
    t.mark_success(a.address, 4.0)  # b is now the least recently successful
    assert t.add(d, 5.0)
    assert b.address not in t and {p.address for p in t.live()} == {a.address, c.address, d.address}
    assert t.add(e, 6.0)  # d never succeeded: it goes before anyone who did
    assert d.address not in t and len(t) == 3


def test_static_peers_are_never_dropped_for_space_but_can_die_and_come_back():
    t = table(max_peers=2, max_failures=2, timeout_s=10.0)
    s1, s2 = info(1, source="static"), PeerInfo("", "boot.example:7000", source="static")
    x = info(3)
    assert t.add(s1, 0.0) and t.add(s2, 0.0)
    assert t.add(x, 0.0) is False  # full of static peers: the newcomer is refused
    assert len(t) == 2
    s3 = info(4, source="static")
    assert t.add(s3, 0.0) and len(t) == 3  # a static one is admitted over the bound
    assert t.health(s3.address).static

    assert t.mark_failure(s1.address, 1.0) is False
    assert t.mark_failure(s1.address, 2.0) is True
    assert s1 not in t.live()
    assert t.evict_dead(3.0) == [] and s1.address in t  # dead static stays, not chosen
    assert all(s1 not in t.choose(random.Random(i), k=3) for i in range(20))
    assert t.evict_dead(10.0) == []  # s2 and s3 timed out: dead, but kept
    assert t.live() == [] and len(t) == 3
    assert {p.address for p in t.static_peers()} == {s1.address, s2.address, s3.address}
    assert t.mark_success(s1.address, 11.0)
    assert t.live() == [s1] and t.health(s1.address).failures == 0


def test_self_is_never_added_by_id_or_address():
    t = table()
    assert t.add(info(1, peer_id=SELF_ID), 0.0) is False
    assert t.add(PeerInfo("", "127.0.0.1:9999", source="static"), 0.0) is False
    assert len(t) == 0
    # a --peer that turns out to be us is removed on its first hello
    boot = PeerInfo("", "localhost:9999", source="static")
    assert t.add(boot, 0.0)
    assert t.mark_success(boot.address, 1.0, peer_id=SELF_ID) is False
    assert len(t) == 0


def test_same_peer_id_at_a_new_address_moves_the_entry():
    t = table(timeout_s=10.0)
    old = info(1, port=7000)
    t.add(old, 0.0)
    t.mark_failure(old.address, 1.0)
    new = info(1, port=7001)
    assert t.add(new, 8.0)
    assert old.address not in t and t.get(new.address) == new
    h = t.health(new.address)
    assert h.failures == 0 and h.added_at == 8.0  # a fresh chance at the new address
    assert t.evict_dead(17.9) == [] and t.evict_dead(18.0) == [new]


def test_hearsay_does_not_move_a_healthy_peer_but_a_direct_announcement_does():
    t = table()
    home = info(1, port=7000)
    t.add(home, 0.0)
    t.mark_success(home.address, 1.0)
    rumour = info(1, port=7999, source="exchange")
    assert t.add(rumour, 2.0) is False and home.address in t
    t.mark_failure(home.address, 3.0)
    assert t.add(rumour, 4.0) and rumour.address in t and home.address not in t


def test_a_conflicting_peer_id_for_a_known_address_is_ignored_until_a_hello_proves_it():
    t = table()
    a = info(1)
    t.add(a, 0.0)
    impostor = PeerInfo(pid(2), a.address, source="exchange")
    assert t.add(impostor, 1.0) is False and t.get(a.address).peer_id == pid(1)
    assert t.mark_success(a.address, 2.0, peer_id=pid(2))  # a verified hello: it restarted with a new key
    assert t.get(a.address).peer_id == pid(2)


def test_hello_fills_in_a_static_peer_id_and_merges_a_duplicate():
    t = table()
    boot = PeerInfo("", "localhost:7000", source="static")
    seen = PeerInfo(pid(5), "127.0.0.1:7000", swarm="s", fingerprint="fp", source="mdns")
    t.add(boot, 0.0)
    t.add(seen, 0.0)
    assert len(t) == 2
    assert t.mark_success(boot.address, 1.0, peer_id=pid(5), rtt=0.2)
    assert len(t) == 1 and seen.address not in t
    h = t.health(boot.address)
    assert h.info.peer_id == pid(5) and h.static and h.rtt_s == pytest.approx(0.2)
    t.mark_success(boot.address, 2.0, rtt=1.0)
    assert t.health(boot.address).rtt_s == pytest.approx(0.875 * 0.2 + 0.125 * 1.0)
    assert t.mark_success("10.9.9.9:1", 3.0) is False  # unknown address: ignored


def test_sample_for_exchange_shares_only_live_peers_that_answered():
    t = table(max_failures=1)
    peers = [info(i) for i in range(1, 7)]
    for p in peers:
        t.add(p, 0.0)
    for p in peers[:4]:
        t.mark_success(p.address, 1.0)
    t.mark_failure(peers[0].address, 2.0)  # answered once, now dead
    shared = t.sample_for_exchange(random.Random(3), n=10)
    assert sorted(p.address for p in shared) == sorted(p.address for p in peers[1:4])
    assert [p.address for p in t.verified()] == sorted(p.address for p in peers[1:4])  # the same rule, in order
    assert len(t.sample_for_exchange(random.Random(3), n=2)) == 2
    assert t.sample_for_exchange(random.Random(3), n=10, exclude={peers[1].peer_id}) != shared
    assert t.sample_for_exchange(random.Random(3), n=2) == t.sample_for_exchange(random.Random(3), n=2)


def test_remove_and_update_all():
    t = table()
    assert t.update_all([info(1), info(2), info(1)], 0.0) == 2
    assert t.remove(info(1).address) == info(1)
    assert t.remove(info(1).address) is None
    assert len(t) == 1


def test_the_table_bounds_are_the_session_configs_held_once() -> None:
    import dataclasses

    from peer.core.config import SessionConfig

    derived = NeighbourConfig.of(SessionConfig(max_peers=5, max_failures=2, silence_timeout_s=9.0), SELF_ID)
    assert (derived.max_peers, derived.max_failures, derived.timeout_s, derived.self_peer_id) == (5, 2, 9.0, SELF_ID)
    session, neighbours = SessionConfig(), NeighbourConfig()
    assert (neighbours.max_peers, neighbours.max_failures, neighbours.timeout_s) == (
        session.max_peers, session.max_failures, session.silence_timeout_s)
    changed = dataclasses.replace(session, max_peers=session.max_peers + 1)
    assert NeighbourConfig.of(changed).max_peers == neighbours.max_peers + 1  # control: the mapping is read, not fixed
