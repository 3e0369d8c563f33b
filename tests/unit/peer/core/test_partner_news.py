"""Which empty answers cost a partner its slot (`Exchanges.finish`, `ExchangeResult.owed`).

A partner whose answers keep carrying nothing is replaced, but only counting answers that owed
news: those whose sender says it published past the copy we hold of it. Prompt sybils that
answer with a control frame and nothing else owe their first copy forever and lose their
slots; an honest straggler, or a partner that publishes once in many of our pulls, or one whose
own pulls already pushed us its update, answers empty between its publishes and keeps its slot.
Real nodes answer here, as a driver hands their `ExchangeResult` to the session."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

from peer.core.actions import Count, Exchange, SendHello
from peer.core.addresses import PeerInfo
from peer.core.config import PartnerConfig, SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.hello import Hello
from peer.core.node import GossipNode
from peer.core.session import Session
from protocol import Identity

SPEC = {"w": ((64,), "float32")}
HONEST, SLOW, OTHER = "10.0.1.1:7000", "10.0.2.1:7000", "10.0.3.1:7000"
SYBILS = [f"10.6.6.6:{7000 + i}" for i in range(24)]


class EmptyAnswerNode(GossipNode):
    """A sybil's node: a signed, ticketed control frame and nothing else in every answer."""

    def _frames_for(self, peer_key, now, withheld):  # type: ignore[no-untyped-def]
        return []


def node(i: int, cls: type[GossipNode] = GossipNode) -> GossipNode:
    return cls(GossipConfig(swarm="t", compression="topk:0.25+int8"), Identity.generate(i.to_bytes(2, "big") * 16),
               SPEC, torch.zeros(64), now=1e9)


class Swarm:
    """A victim's session and node, and the real nodes at each address it may pull."""

    def __init__(self, addresses: list[str], seed: int = 0, **cfg: object) -> None:
        self.victim = node(0)
        self.nodes = {a: node(i + 1, EmptyAnswerNode if a in SYBILS else GossipNode) for i, a in enumerate(addresses)}
        self.session = Session(SessionConfig(join=False, **cfg), peer_id=self.victim.identity.public_key.hex(),  # type: ignore[arg-type]
                               rng=random.Random(seed))
        self.verify(self.session.start(0.0, listen="10.0.0.99:7000", bootstrap=addresses, step=0, hello_seq_base=0))
        self.pulls: dict[str, int] = {a: 0 for a in addresses}
        self.news: dict[str, int] = {a: 0 for a in addresses}
        self.barren = 0

    def verify(self, actions: list) -> None:  # type: ignore[type-arg]
        """Answer the hellos among `actions`: each address is verified for its node's key."""
        for h in [a for a in actions if isinstance(a, SendHello)]:
            key = self.nodes[h.address].identity.public_key.hex()
            self.session.hello_done(h.token, 0.1, hello=Hello(key, 0, h.address, ()))

    def publish(self, address: str, step: int) -> None:
        gen = torch.Generator().manual_seed(step * 1000 + len(address))
        self.nodes[address].publish(torch.randn(64, generator=gen), step, 1e9 + step)

    def pushes(self, address: str, step: int) -> None:
        """`address` pulls the victim (its request carries its update, once it holds a ticket)."""
        other, me = self.nodes[address], self.victim.identity.public_key
        body = other.build_request(me if me in other.neighbours or other.held_tickets.get(me)[1] else None, 1e9 + step)
        reply, _ = self.victim.handle_request(body, 1e9 + step, verified={other.identity.public_key})
        other.handle_response(reply, 1e9 + step)

    def round(self, step: int) -> None:
        """The victim publishes and pulls; each pulled node answers as a driver would see it."""
        now = 1.0 + step
        self.victim.publish(torch.full((64,), float(step)), step, 1e9 + step)
        for ex in [a for a in self.session.step_boundary(step, True, now) if isinstance(a, Exchange)]:
            other = self.nodes[ex.address]
            key = bytes.fromhex(ex.peer_id) if ex.peer_id else None
            reply, _ = other.handle_request(self.victim.build_request(key, 1e9 + step), 1e9 + step,
                                            verified={self.victim.identity.public_key})
            result = self.victim.handle_response(reply, 1e9 + step)
            self.pulls[ex.address] += 1
            self.news[ex.address] += result.news > 0
            done = self.session.exchange_done(ex.token, now + 0.01, peer_id=result.sender.hex(), rtt=0.01,
                                              carried=result.news, owed=result.owed)
            self.barren += sum(1 for a in done if isinstance(a, Count) and a.name == "partners_barren_total")

    def run(self, rounds: int, each: Callable[["Swarm", int], None]) -> "Swarm":
        for step in range(1, rounds + 1):
            each(self, step)
            self.round(step)
        return self


def honest_every_step(s: Swarm, step: int) -> None:
    s.publish(HONEST, step)


def test_prompt_empty_answers_lose_their_slots() -> None:
    for seed in range(2):
        s = Swarm([HONEST, SLOW] + SYBILS, seed).run(300, honest_every_step)
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
    s = Swarm([HONEST] + SYBILS[:4], partners=PartnerConfig(barren_answers=2)).run(40, honest_every_step)
    assert s.barren == 4 and max(s.pulls[a] for a in SYBILS[:4]) == 2, s.pulls
    assert s.session.partners == [HONEST]
    with pytest.raises(ValueError, match="barren_answers"):
        PartnerConfig(barren_answers=1)
    with pytest.raises(TypeError, match="PartnerConfig"):
        SessionConfig(partners={"barren_answers": 2})  # type: ignore[arg-type]
