"""Which empty answers cost a partner its slot (`Exchanges.finish`, `ExchangeResult.owed`).

A partner whose answers keep carrying nothing is replaced, but only counting answers that owed
news: those whose sender says it published past the copy we hold of it. Prompt sybils that
answer with a control frame and nothing else owe their first copy forever and lose their
slots; an honest straggler, or a partner that publishes once in many of our pulls, or one whose
own pulls already pushed us its update, answers empty between its publishes and keeps its slot.
Real nodes answer here, as a driver hands their `ExchangeResult` to the session."""

from __future__ import annotations

import pytest

from peer.core.addresses import PeerInfo
from peer.core.config import PartnerConfig, SessionConfig
from tests.unit.peer.core.partner_swarm import EmptyAnswerNode, Swarm

HONEST, SLOW, OTHER = "10.0.1.1:7000", "10.0.2.1:7000", "10.0.3.1:7000"
SYBILS = [f"10.6.6.6:{7000 + i}" for i in range(24)]
EMPTY = {a: EmptyAnswerNode for a in SYBILS}


def honest_every_step(s: Swarm, step: int) -> None:
    s.publish(HONEST, step)


def test_prompt_empty_answers_lose_their_slots() -> None:
    for seed in range(2):
        s = Swarm([HONEST, SLOW] + SYBILS, seed, EMPTY).run(300, honest_every_step)
        clean = Swarm([HONEST, SLOW], seed).run(300, honest_every_step)
        assert not set(SYBILS) & set(s.session.partners) and s.barren == len(SYBILS), (seed, s.session.partners)
        # each sybil is pulled until its third answer that owed news and brought none
        assert max(s.pulls[a] for a in SYBILS) <= 4, (seed, s.pulls)
        assert s.pulls[HONEST] >= 0.8 * clean.pulls[HONEST], (seed, s.pulls[HONEST], clean.pulls[HONEST])


def test_a_partner_that_publishes_rarely_or_pushes_its_news_keeps_its_slot() -> None:
    """SLOW publishes once in 32 of the victim's rounds (a straggler, or a long publish period);
    HONEST publishes every round and pulls the victim first, so the victim's own pulls of it
    find nothing new. Most of their answers are empty, and neither gives its slot to OTHER,
    a third peer that publishes every round and turns up after the first."""
    def each(s: Swarm, step: int) -> None:
        for address in (HONEST, OTHER):
            s.publish(address, step)
        s.pushes(HONEST, step)
        if step % 32 == 0:
            s.publish(SLOW, step)
        if step == 2:
            s.verify(s.session.found(PeerInfo(peer_id="", address=OTHER, source="mdns"), 2.0))

    s = Swarm([HONEST, SLOW, OTHER], max_partners=2, pulls_per_publish=2).run(320, each)
    assert set(s.session.partners) == {HONEST, SLOW} and s.pulls[OTHER] == 0, (s.session.partners, s.pulls)
    assert s.barren == 0
    assert s.pulls[SLOW] == 320 and s.news[SLOW] == 11, (s.pulls, s.news)  # its first copy and each publish
    assert s.news[HONEST] <= 0.1 * s.pulls[HONEST], (s.pulls, s.news)  # its own pushes brought its updates


def test_the_session_weighs_partners_by_its_config() -> None:
    """`SessionConfig.partners` is what the session's partner choice reads; a first contact's answer
    (a ticket, no frames) counts, so fewer than two such answers would drop honest partners too."""
    s = Swarm([HONEST] + SYBILS[:4], kinds=EMPTY, partners=PartnerConfig(barren_answers=2)).run(40, honest_every_step)
    assert s.barren == 4 and max(s.pulls[a] for a in SYBILS[:4]) == 2, s.pulls
    assert s.session.partners == [HONEST]
    with pytest.raises(ValueError, match="barren_answers"):
        PartnerConfig(barren_answers=1)
    with pytest.raises(TypeError, match="PartnerConfig"):
        SessionConfig(partners={"barren_answers": 2})  # type: ignore[arg-type]
