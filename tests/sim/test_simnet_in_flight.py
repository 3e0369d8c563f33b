"""SimPeer mirrors Network's exchange worker: MAX_IN_FLIGHT exchanges, each with another neighbour."""

import simnet.sim_peer
from peer.network import MAX_IN_FLIGHT
from simnet.config import world_from_dict
from simnet.swarm import GossipSim


def small_world(**extra):
    return world_from_dict({
        "n_peers": 4, "model": "lsq", "duration_s": 20.0,
        "topology": {"kind": "full"},
        "links": {"latency_s": 0.01, "request_timeout_s": 10.0},
        **extra,
    })


def kept_exchanging_while_waiting_on_a_silent_neighbour() -> int:
    """How many 0.25 s windows peer 1 finished an exchange while a request to peer 0 hung."""
    # peer 0 is cut off (messages to it vanish): a request to it waits out the 10 s timeout
    sim = GossipSim(small_world(partitions=[{"start_s": 0.5, "end_s": 100.0, "groups": [[0]]}]), seed=0)
    p = sim.peers[1]
    silent = sim.peers[0].address
    ok_while_waiting = 0
    t = 0.5
    while t < 9.0:
        before = dict(p._in_flight)
        ok = p.metrics.get("exchanges_ok_total")
        t += 0.25
        sim.advance_to(t)
        values = list(p._in_flight.values())
        assert len(values) <= simnet.sim_peer.MAX_IN_FLIGHT and len(set(values)) == len(values)
        waiting = [tok for tok, a in before.items() if a == silent and p._in_flight.get(tok) == silent]
        if waiting and p.metrics.get("exchanges_ok_total") > ok:
            ok_while_waiting += 1
    return ok_while_waiting


def test_a_silent_neighbour_holds_one_slot_not_the_peer(monkeypatch):
    assert simnet.sim_peer.MAX_IN_FLIGHT == MAX_IN_FLIGHT == 2
    assert kept_exchanging_while_waiting_on_a_silent_neighbour() >= 3
    monkeypatch.setattr(simnet.sim_peer, "MAX_IN_FLIGHT", 1)  # control: the old worker
    assert kept_exchanging_while_waiting_on_a_silent_neighbour() == 0


def test_a_joining_peer_refuses_exchanges():
    sim = GossipSim(small_world(), seed=0)
    joining = sim.peers[2]
    joining.node.accepting = False  # as while it fetches a state (the runtime answers 503)
    sim.advance_to(3.0)
    assert joining.metrics.get("exchanges_refused_joining_total") > 0
    failures = sum(sim.peers[i].metrics.get("exchange_failures_total") for i in (0, 1, 3))
    assert failures == joining.metrics.get("exchanges_refused_joining_total")
