"""An answer carries our model-sized snapshot only to a ticketed, verified asker, within a budget
per address and in total (peer.core.snapshots); a first contact of a few hundred bytes gets a
ticket and nothing else. Before, every ticketless first contact was answered with a snapshot."""

from __future__ import annotations

import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.snapshots import AnswerBudget
from peer.metrics import Metrics
from protocol import FrameKind, Identity, Limits, decode_frame, unpack_bundle
from tests.unit.exchange_helpers import exchange

NOW = 1_000_000.0
NUMEL = 4096
SPEC = {"w": ((NUMEL,), "float32")}


def node(i: int, **cfg) -> GossipNode:
    return GossipNode(GossipConfig(swarm="leech", **cfg), Identity.generate(bytes([i]) * 32), SPEC, torch.randn(NUMEL),
                      now=NOW, metrics=Metrics(process=False))


def snapshots_in(reply: bytes, victim: GossipNode) -> int:
    frames = unpack_bundle(reply, Limits())[1:]
    return sum(decode_frame(f, victim.policy, now=NOW).header.kind == FrameKind.SNAPSHOT for f in frames)


def test_a_first_contact_gets_a_ticket_and_no_snapshot():
    victim, leech = node(1), node(2)
    request = leech.build_request(None, NOW)
    reply, result = victim.handle_request(request, NOW, address="10.0.0.2", verified={leech.identity.public_key})
    assert not result.accepted and snapshots_in(reply, victim) == 0
    assert len(reply) < 4 * len(request)  # was a snapshot: the model's size for a few hundred bytes
    assert victim.metrics.get("snapshots_withheld_total", reason="unticketed") == 1
    leech.handle_response(reply, NOW)
    assert leech.held_tickets.get(victim.identity.public_key)[1] > 0  # what an honest newcomer needs


def test_a_ticketed_asker_gets_the_snapshot_only_once_its_address_is_verified():
    victim, asker = node(1), node(2)
    key = victim.identity.public_key
    asker.handle_response(victim.handle_request(asker.build_request(None, NOW), NOW, address="10.0.0.2")[0], NOW)
    reply, result = victim.handle_request(asker.build_request(key, NOW), NOW, address="10.0.0.2")
    assert result.accepted and snapshots_in(reply, victim) == 0  # its push was taken; nothing model-sized back
    assert victim.metrics.get("snapshots_withheld_total", reason="unverified") == 1
    asker.handle_response(reply, NOW)
    reply, _ = victim.handle_request(asker.build_request(key, NOW + 1), NOW + 1, address="10.0.0.2",
                                     verified={asker.identity.public_key})
    assert snapshots_in(reply, victim) == 1


def _ticketed_asks(victim: GossipNode, askers: list[GossipNode], addresses: list[str], times: list[float]) -> int:
    """Each asker (verified) asks at each time from its address, never acknowledging our copy; snapshots sent."""
    key, sent = victim.identity.public_key, 0
    verified = {a.identity.public_key for a in askers}
    for a, address in zip(askers, addresses):
        a.handle_response(victim.handle_request(a.build_request(None, times[0]), times[0], address=address)[0], times[0])
    for t in times:
        for a, address in zip(askers, addresses):
            reply, _ = victim.handle_request(a.build_request(key, t), t, address=address, verified=verified)
            sent += snapshots_in(reply, victim)
            a.handle_response(reply, t)
            a.forget(key)  # a leech that says it holds nothing of ours, every time
    return sent


def test_snapshots_to_one_address_and_to_all_stay_within_the_budget():
    cfg = GossipConfig(swarm="leech")
    victim = node(1)
    times = [NOW + 0.5 * i for i in range(120)]  # 60 s of a request every 0.5 s
    one = _ticketed_asks(victim, [node(2)], ["10.0.0.2"], times)
    assert one <= 1 + 60 / cfg.answer_snapshot_every_s  # one per address per answer_snapshot_every_s
    victim = node(1)
    many = _ticketed_asks(victim, [node(10 + i) for i in range(40)], [f"10.0.1.{i}" for i in range(40)], times)
    assert many <= cfg.max_neighbours + cfg.answer_snapshots_per_min  # the burst, then the rate
    assert victim.metrics.get("snapshots_withheld_total", reason="budget") > 0


def test_an_honest_pair_still_holds_each_others_copy_after_two_exchanges():
    a, b = node(1), node(2)
    for i in range(2):
        exchange(a, b, NOW + i)
    assert a.neighbours[b.identity.public_key].copy.x_hat is not None
    assert b.neighbours[a.identity.public_key].copy.x_hat is not None


def test_answer_budget_per_address_refills_at_its_rate():
    budget = AnswerBudget(every_s=10.0, per_min=600.0, burst=8, now=0.0)
    key = b"k" * 32
    ask = lambda t, address="a": budget.withheld(key, ticketed=True, verified={key}, address=address, now=t)
    assert ask(0.0) is None and ask(1.0) == "address_budget" and ask(1.0, "b") is None and ask(10.5) is None
    assert budget.withheld(key, ticketed=False, verified={key}, address="c", now=0) == "unticketed"
    assert budget.withheld(key, ticketed=True, verified=set(), address="c", now=0) == "unverified"



def test_a_gap_fill_in_place_of_updates_we_hold_is_not_rationed_but_still_needs_ticket_and_address():
    """Between established partners a snapshot replaces updates once it is the smaller; it costs no
    more than the updates they are owed, so the buckets (for first copies to new keys) do not apply."""
    from peer.core.snapshots import AnswerBudget

    budget, key = AnswerBudget(every_s=10.0, per_min=12.0, burst=8, now=0.0), b"\x01" * 32
    assert budget.withheld(key, ticketed=True, verified={key}, address="a:1", now=0.0) is None
    assert budget.withheld(key, ticketed=True, verified={key}, address="a:1", now=0.1) == "address_budget"
    for t in (0.2, 0.3, 0.4):
        assert budget.withheld(key, ticketed=True, verified={key}, address="a:1", now=t, gap_fill=True) is None
    assert budget.withheld(key, ticketed=False, verified={key}, address="a:1", now=0.5, gap_fill=True) == "unticketed"
    assert budget.withheld(key, ticketed=True, verified=set(), address="a:1", now=0.5, gap_fill=True) == "unverified"
