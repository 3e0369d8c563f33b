"""A partner replaced for giving nothing comes back once it brings news (`Exchanges.reinstate`).

An honest partner answers a first contact with a ticket alone, and withholds its snapshot until
it has verified our address: three empty answers that owed news, and it was replaced; until no
partner at all was left it stayed out for good. Now a request of its own that changes our copy
of it (its push, once it has verified us) lets it fill a vacancy again. A sybil that never sends a
frame brings no news, and news pushed under one key cannot free the address another key holds."""

from __future__ import annotations

from collections.abc import Collection

from peer.core.node import ExchangeResult, GossipNode
from tests.unit.peer.core.partner_swarm import EmptyAnswerNode, Swarm

HONEST, LATE, ATTACKER = "10.0.1.1:7000", "10.0.2.1:7000", "10.0.3.1:7000"
SYBILS = [f"10.6.6.6:{7000 + i}" for i in range(4)]
VERIFIES_AT = 20
"""The round from which LATE has verified the victim's address (and pushes to it)."""


class LateVerifier(GossipNode):
    """An honest node whose session verifies the victim's address only at round `VERIFIES_AT`:
    until then its answers withhold its snapshot, as they do to any unverified asker."""

    def handle_request(self, body: bytes, now: float, *, address: str = "",
                       verified: Collection[bytes] = frozenset()) -> tuple[bytes, ExchangeResult]:
        return super().handle_request(body, now, address=address,
                                      verified=verified if now >= 1e9 + VERIFIES_AT else ())


def late_swarm(seed: int) -> Swarm:
    def each(s: Swarm, step: int) -> None:
        for address in (HONEST, LATE, ATTACKER):
            s.publish(address, step)
        for sybil in SYBILS:  # requests without a frame: nothing to bring
            s.pushes(sybil, step)
        s.pushes(ATTACKER, step, claims=SYBILS[0])  # news, but from a key that does not listen there
        if step >= VERIFIES_AT:
            s.pushes(LATE, step)

    kinds = {a: EmptyAnswerNode for a in SYBILS} | {LATE: LateVerifier}
    return Swarm([HONEST, LATE] + SYBILS, seed, kinds, strangers=(ATTACKER,)).run(120, each)


def test_a_partner_replaced_before_it_verified_us_returns_once_its_push_brings_news() -> None:
    for seed in range(3):
        s = late_swarm(seed)
        early = sum(1 for step, a in s.pulled if a == LATE and step < VERIFIES_AT)
        late = sum(1 for step, a in s.pulled if a == LATE and step >= VERIFIES_AT)
        # replaced like the sybils, once: back, its answers owe nothing its pushes did not bring
        assert early == 3 and s.barren == 1 + len(SYBILS), (seed, early, s.counts)
        assert s.counts["partners_reinstated_total"] == 1, (seed, s.counts)
        assert LATE in s.session.partners and late >= 0.8 * (120 - VERIFIES_AT), (seed, late, s.session.partners)


def test_requests_without_news_or_under_another_key_let_no_one_back() -> None:
    s = late_swarm(0)
    assert not set(SYBILS) & set(s.session.partners), s.session.partners
    assert max(s.pulls[a] for a in SYBILS) <= 3, s.pulls
    assert ATTACKER not in s.session.partners and s.pulls[SYBILS[0]] <= 3  # its news freed no sybil


def test_news_from_a_partner_in_good_standing_changes_nothing() -> None:
    s = Swarm([HONEST], 0)
    s.publish(HONEST, 1)
    s.pushes(HONEST, 1)  # first contact: a ticket
    s.pushes(HONEST, 1)
    assert s.victim.neighbours[s.nodes[HONEST].identity.public_key].copy.x_hat is not None
    assert s.counts["partners_reinstated_total"] == 0, s.counts
