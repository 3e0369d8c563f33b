"""A victim's session and node beside real nodes at the addresses it may pull, for tests of how
partners are kept and replaced (`peer.core.exchanges`). Each pulled node answers as a real one
would, and the session is told what a driver tells it: what each answer carried, and what each
push (a partner's request) brought."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping

import torch

from peer.core.actions import Action, Count, Exchange, SendHello
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.hello import Hello
from peer.core.node import GossipNode
from peer.core.session import Session
from protocol import Identity

SPEC = {"w": ((64,), "float32")}


class EmptyAnswerNode(GossipNode):
    """A sybil's node: a signed, ticketed control frame and nothing else in every answer or request."""

    def _frames_for(self, peer_key, now, withheld):  # type: ignore[no-untyped-def]
        return []


def node(i: int, cls: type[GossipNode] = GossipNode) -> GossipNode:
    return cls(GossipConfig(swarm="t", compression="topk:0.25+int8"), Identity.generate(i.to_bytes(2, "big") * 16),
               SPEC, torch.zeros(64), now=1e9)


class Swarm:
    """The victim's session and node, and a node at each address (`kinds`: its class, else GossipNode);
    the victim knows `addresses` from the start (`--peer`), and of `strangers` only what they send."""

    def __init__(self, addresses: list[str], seed: int = 0, kinds: Mapping[str, type[GossipNode]] | None = None,
                 strangers: tuple[str, ...] = (), **cfg: object) -> None:
        kinds = kinds or {}
        self.victim = node(0)
        self.nodes = {a: node(i + 1, kinds.get(a, GossipNode)) for i, a in enumerate(addresses + list(strangers))}
        self.session = Session(SessionConfig(join=False, **cfg), peer_id=self.victim.identity.public_key.hex(),  # type: ignore[arg-type]
                               rng=random.Random(seed))
        self.verify(self.session.start(0.0, listen="10.0.0.99:7000", bootstrap=addresses, step=0, hello_seq_base=0))
        self.pulls: dict[str, int] = {a: 0 for a in addresses}
        self.news: dict[str, int] = {a: 0 for a in addresses}
        self.pulled: list[tuple[int, str]] = []
        """(round, address) of every pull, in order."""
        self.counts: Counter[str] = Counter()
        """Every counter the session's answers named."""

    @property
    def barren(self) -> int:
        return self.counts["partners_barren_total"]

    def count(self, actions: list[Action]) -> None:
        self.counts.update(a.name for a in actions if isinstance(a, Count))

    def verify(self, actions: list[Action]) -> None:
        """Answer the hellos among `actions`: each address is verified for its node's key."""
        for h in [a for a in actions if isinstance(a, SendHello)]:
            key = self.nodes[h.address].identity.public_key.hex()
            self.session.hello_done(h.token, 0.1, hello=Hello(key, 0, h.address, ()))

    def publish(self, address: str, step: int) -> None:
        gen = torch.Generator().manual_seed(step * 1000 + len(address))
        self.nodes[address].publish(torch.randn(64, generator=gen), step, 1e9 + step)

    def pushes(self, address: str, step: int, claims: str = "") -> None:
        """`address` pulls the victim (its request carries its update, once it holds a ticket), and
        the session hears of it as a driver tells it, the request naming `claims` (default: `address`)
        as its listen address."""
        other, me = self.nodes[address], self.victim.identity.public_key
        body = other.build_request(me if me in other.neighbours or other.held_tickets.get(me)[1] else None, 1e9 + step)
        reply, result = self.victim.handle_request(body, 1e9 + step, verified={other.identity.public_key})
        other.handle_response(reply, 1e9 + step)
        self.count(self.session.inbound_exchange(claims or address, result.sender.hex(), 1.0 + step,
                                                 carried=result.news))

    def answer(self, address: str, body: bytes, now: float) -> bytes:
        """`address`'s node answers the victim's request (its session verified the victim)."""
        reply, _ = self.nodes[address].handle_request(body, now, verified={self.victim.identity.public_key})
        return reply

    def round(self, step: int) -> None:
        """The victim publishes and pulls; each pulled node answers as a driver would see it."""
        now = 1.0 + step
        self.victim.publish(torch.full((64,), float(step)), step, 1e9 + step)
        for ex in [a for a in self.session.step_boundary(step, True, now) if isinstance(a, Exchange)]:
            key = bytes.fromhex(ex.peer_id) if ex.peer_id else None
            reply = self.answer(ex.address, self.victim.build_request(key, 1e9 + step), 1e9 + step)
            result = self.victim.handle_response(reply, 1e9 + step)
            self.pulls[ex.address] += 1
            self.pulled.append((step, ex.address))
            self.news[ex.address] += result.news > 0
            self.count(self.session.exchange_done(ex.token, now + 0.01, peer_id=result.sender.hex(), rtt=0.01,
                                                  carried=result.news, owed=result.owed, step=result.step))

    def run(self, rounds: int, each: Callable[["Swarm", int], None]) -> "Swarm":
        for step in range(1, rounds + 1):
            each(self, step)
            self.round(step)
        return self
