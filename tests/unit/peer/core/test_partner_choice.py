"""Partners that answer promptly with nothing do not take a peer's exchanges (`peer.core.exchanges`).

Two dozen listeners on one IP, each with a fresh key, answered hellos and sent prompt, empty
exchange answers: verified, they took six of a victim's eight partner slots, its exchanges with
its two honest neighbours fell to a fifth, and its hello named sixteen of them to others. Now
vacancies are filled spread over hosts and subnets first, a pull goes to the free partner whose
answers carried news most often, a partner whose answers keep carrying nothing is replaced like
a failed one, and a hello names a few peers of one host at most."""

from __future__ import annotations

import random

import torch

from peer.core.actions import Exchange, SendHello
from peer.core.config import PartnerConfig, SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.hello import Hello
from peer.core.node import GossipNode
from peer.core.session import Session
from peer.core.table import NeighbourConfig
from protocol import Identity
from tests.unit.exchange_helpers import push

ME = "aa" * 32
HONEST = [f"10.0.{i}.1:7000" for i in range(1, 3)]
SYBILS = [f"10.6.6.6:{7000 + i}" for i in range(24)]


def key(address: str) -> str:
    return f"{abs(hash(address)):064x}"[-64:]


def verified(addresses: list[str], seed: int = 0, **cfg) -> Session:
    s = Session(SessionConfig(join=False, **cfg), peer_id=ME, rng=random.Random(seed))
    out = s.start(0.0, listen="10.0.0.99:7000", bootstrap=addresses, step=0, hello_seq_base=0)
    for h in [a for a in out if isinstance(a, SendHello)]:
        s.hello_done(h.token, 0.1, hello=Hello(key(h.address), 0, h.address, ()))
    return s


def exchanges_with_honest(addresses: list[str], publishes: int = 300, seed: int = 0) -> int:
    """Exchanges started with the honest neighbours over `publishes` publishes, every answer
    immediate: an honest one carries an update, a sybil's nothing."""
    s, honest = verified(addresses, seed), 0
    for t in range(publishes):
        now = 1.0 + t
        for ex in [a for a in s.step_boundary(t, True, now) if isinstance(a, Exchange)]:
            news = ex.address in HONEST
            honest += news
            s.exchange_done(ex.token, now + 0.01, peer_id=key(ex.address), rtt=0.01, carried=int(news))
    return honest


def test_answering_sybils_on_one_host_leave_the_honest_neighbours_their_exchanges() -> None:
    for seed in range(3):
        clean = exchanges_with_honest(HONEST, seed=seed)
        attacked = exchanges_with_honest(HONEST + SYBILS, seed=seed)
        assert attacked >= 0.8 * clean, (seed, attacked, clean)


def test_vacancies_go_to_other_hosts_before_a_crowded_one() -> None:
    honest = [f"10.{i}.0.1:7000" for i in range(1, 7)]  # six peers, each on a subnet of its own
    s = verified(honest + SYBILS)
    s.step_boundary(0, True, 1.0)
    assert set(honest) <= set(s.partners) and len(s.partners) == SessionConfig().max_partners
    assert sum(p in SYBILS for p in s.partners) == 2


def test_a_partner_whose_answers_keep_carrying_nothing_is_replaced() -> None:
    s = verified(HONEST[:1] + SYBILS[:1] + ["10.9.0.1:7000"], max_partners=2, pulls_per_publish=1)
    empty = 0
    for t in range(40):
        for ex in [a for a in s.step_boundary(t, True, 1.0 + t) if isinstance(a, Exchange)]:
            news = ex.address != SYBILS[0]
            empty += not news
            s.exchange_done(ex.token, 1.01 + t, peer_id=key(ex.address), rtt=0.01, carried=int(news))
    assert SYBILS[0] not in s.partners and empty <= PartnerConfig().barren_answers
    assert s.exchanges.scores[HONEST[0]] > 0.9


def test_a_hello_names_a_few_peers_of_one_host() -> None:
    s = verified(HONEST + SYBILS)
    named = s.hello_sample()
    assert set(HONEST) <= {p.address for p in named}
    assert sum(p.address in SYBILS for p in named) == NeighbourConfig().hello_per_host


def test_what_an_answer_brought_is_counted_for_the_session() -> None:
    """`ExchangeResult.news`, which a driver hands the session as `carried`."""
    def node(i: int) -> GossipNode:
        return GossipNode(GossipConfig(swarm="t", compression="topk:0.1+int8"), Identity.generate(bytes([i]) * 32),
                          {"w": ((256,), "float32")}, torch.zeros(256), now=1e9)

    a, b = node(1), node(2)
    push(a, b, 1e9)
    push(b, a, 1e9)  # each holds the other's copy and a ticket of the other's
    b.publish(torch.randn(256, generator=torch.Generator().manual_seed(0)), 1, 1e9 + 1)
    reply, _ = b.handle_request(a.build_request(b.identity.public_key, 1e9 + 2), 1e9 + 2, verified={a.identity.public_key})
    assert a.handle_response(reply, 1e9 + 2).news == 1  # b's update
    reply, _ = b.handle_request(a.build_request(b.identity.public_key, 1e9 + 3), 1e9 + 3, verified={a.identity.public_key})
    assert a.handle_response(reply, 1e9 + 3).news == 0  # nothing new since
