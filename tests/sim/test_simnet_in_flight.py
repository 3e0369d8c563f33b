"""The sim driver performs the session's in-flight limit: a silent neighbour holds one slot, not
the peer, and once its exchange stalls not even that."""

from peer.core.session import Session
from simnet.runs.config import world_from_dict
from simnet.runs.swarm import GossipSim


def small_world(**extra):
    return world_from_dict({
        "n_peers": 4, "model": "lsq", "duration_s": 20.0,
        "topology": {"kind": "full"},
        "links": {"latency_s": 0.01},
        **extra,
        "session": {"request_timeout_s": 10.0, **extra.get("session", {})},
    })


NO_STALL = 100.0
"""stall_min_s past the request timeout: an exchange holds its slot until it fails."""


def kept_exchanging_while_waiting_on_a_silent_neighbour(max_in_flight: int, stall_min_s: float = NO_STALL) -> int:
    """How many 0.25 s windows peer 1 finished an exchange while a request to peer 0 hung."""
    # peer 0 is cut off at 0.5 s (after everyone verified it): a request to it waits out the 10 s timeout
    sim = GossipSim(small_world(partitions=[{"start_s": 0.5, "end_s": 100.0, "groups": [[0]]}],
                                session={"max_in_flight": max_in_flight, "pulls_per_publish": 1, "stall_min_s": stall_min_s}), seed=0)
    p = sim.peers[1]
    silent = sim.peers[0].address
    ok_while_waiting = 0
    t = 0.5
    while t < 9.0:
        before = dict(p.session.in_flight)
        ok = p.metrics.get("exchanges_ok_total")
        t += 0.25
        sim.advance_to(t)
        values = list(p.session.in_flight.values())
        assert len(values) <= p.session.cfg.max_partners and len(set(values)) == len(values)
        assert len(values) - len(p.session.stalled(sim.now())) <= max_in_flight
        waiting = [tok for tok, a in before.items() if a == silent and p.session.in_flight.get(tok) == silent]
        if waiting and p.metrics.get("exchanges_ok_total") > ok:
            ok_while_waiting += 1
    return ok_while_waiting


def test_a_silent_neighbour_holds_one_slot_not_the_peer():
    assert kept_exchanging_while_waiting_on_a_silent_neighbour(2) >= 3
    assert kept_exchanging_while_waiting_on_a_silent_neighbour(1) == 0  # control: one slot, held


def test_a_stalled_exchange_gives_its_slot_back():
    assert kept_exchanging_while_waiting_on_a_silent_neighbour(1, stall_min_s=2.0) >= 3


def test_a_joining_peer_refuses_exchanges(monkeypatch):
    sim = GossipSim(small_world(), seed=0)
    joining = sim.peers[2].session
    monkeypatch.setattr(Session, "accepting", property(lambda s: s is not joining))  # as while fetching a state
    sim.advance_to(3.0)
    refused = sim.peers[2].metrics.get("exchanges_refused_joining_total")
    assert refused > 0
    failures = sum(sim.peers[i].metrics.get("exchange_failures_total") for i in (0, 1, 3))
    assert failures == refused
