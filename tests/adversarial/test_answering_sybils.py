"""Answering sybils against a real `gossip-tts peer --preset tiny` victim with two honest neighbours.

24 listeners on the victim's own IP, each with a fresh key, make a first contact naming their
address, answer the hello the victim dials them with (signed over its nonce), and answer every
exchange at once with a ticketed control frame and nothing else. Verified, they took six of
the victim's eight partner slots for good, and its exchanges with its honest neighbours fell to
a fifth. Now an answer that owed news (its sender is past the copy we hold of it: here, we hold
none) and carried none counts against a partner, and after three in a row it is replaced
(`peer.core.exchanges`): the victim's exchanges with its honest neighbours per update it
publishes are 0.8 of the clean window before the sybils came or more once they are replaced;
in the window in which they arrive, each sybil may cost the victim the three barren answers the
rule lets it give once, and no more (with a tenth of the clean window's exchanges for its noise).
Per update, since the sybils' work (and the victim's snapshots pushed to them) shares this
machine's two cores with the victim's training."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch
from aiohttp import web

from peer.core.config import PartnerConfig
from peer.core.gossip_config import GossipConfig
from peer.core.hello import make_hello
from peer.core.node import GossipNode
from protocol import Identity, VerifyPolicy, flat_model_spec
from tests.adversarial.conftest import http, metric, read_state, source_ip, status, wait_until

pytestmark = pytest.mark.slow

SYBILS = 24
WINDOW_S = 40.0


class EmptyAnswers(GossipNode):
    """A sybil's node: the victim's swarm and model, and no frame of its own copy in any answer."""

    def __init__(self, swarm: str, fingerprint: str, x: torch.Tensor, listen: str) -> None:
        numel = x.numel()
        super().__init__(GossipConfig(swarm=swarm), Identity.generate(), {"w": ((numel,), "float32")}, x,
                         now=time.time(), listen=listen)
        self.fingerprint = fingerprint
        self.policy = VerifyPolicy(swarm=swarm, fingerprint=fingerprint, limits=self.limits,
                                   model_spec=flat_model_spec(numel))

    def _frames_for(self, peer_key, now, withheld):  # type: ignore[no-untyped-def]
        return []


class Sybils:
    """`SYBILS` listeners on 127.0.0.1 served by the attacker's event loop, each with its own key."""

    def __init__(self, attacker, swarm: str, fingerprint: str, x: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
        self.swarm, self.fingerprint, self.x = swarm, fingerprint, x
        self.nodes: dict[str, EmptyAnswers] = {}
        self.asked: dict[str, int] = {}  # requester's key (hex) -> exchanges the sybils answered it
        self.addresses = [attacker.serve(self._handler(i)) for i in range(SYBILS)]
        for i, address in enumerate(self.addresses):
            self.nodes[str(i)] = EmptyAnswers(swarm, fingerprint, x, address)

    def _handler(self, i: int):  # type: ignore[no-untyped-def]
        async def handle(request: web.Request) -> web.StreamResponse:
            node = self.nodes[str(i)]
            if request.path == "/v1/hello":
                hello = make_hello(node.identity, swarm=self.swarm, fingerprint=self.fingerprint, seq=int(time.time() * 1e6),
                                   step=0, now=time.time(), listen=node.listen, peers=[], limits=node.limits,
                                   nonce=request.query.get("nonce", ""))
                return web.Response(body=hello)
            if request.path == "/v1/exchange":
                body = await request.content.read()  # past aiohttp's 1 MiB default: the victim pushes its snapshot
                reply, result = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: node.handle_request(body, time.time()))
                self.asked[result.sender.hex()] = self.asked.get(result.sender.hex(), 0) + 1
                return web.Response(body=reply)
            return web.Response(status=404)

        return handle

    def contact(self, base: str) -> None:
        """A first contact from every sybil, each from a source address of its own (one address gets
        a few a second): the victim learns the sybil's listen address and dials it."""
        for i, node in enumerate(self.nodes.values()):
            code, reply = http(base + "/v1/exchange", node.build_request(None, time.time()), source=source_ip(500 + i))
            assert code == 200, code
            node.handle_response(reply, time.time())


def window(base: str, sybils: Sybils | None, victim_key: str) -> tuple[float, float]:
    """(the victim's exchanges with honest peers, its publishes) over `WINDOW_S`."""
    def read() -> tuple[float, float, int]:
        asked = sybils.asked.get(victim_key, 0) if sybils else 0
        return metric(base, "gossip_tts_exchanges_ok_total"), metric(base, "gossip_tts_published_total"), asked

    ok0, pub0, asked0 = read()
    time.sleep(WINDOW_S)
    ok1, pub1, asked1 = read()
    return (ok1 - ok0) - (asked1 - asked0), pub1 - pub0


def test_answering_sybils_leave_the_victim_its_honest_exchanges(peers, attacker, swarm_name) -> None:
    # A publish every step: the windows compare exchanges per update, and a budget-set period
    # (the default) follows the CPU the box has left, which moves between windows on 2 busy cores.
    every = ("--gossip-every", "1")
    honest1 = peers("honest1", *every, shard=1)
    honest2 = peers("honest2", *every, "--peer", honest1.wait_listening(), shard=1)
    victim = peers("victim", *every, "--peer", honest1.address, "--peer", honest2.wait_listening())
    base = f"http://{victim.wait_listening()}"
    wait_until(lambda: metric(base, "gossip_tts_exchanges_ok_total") >= 10, 180, "the victim exchanges")
    victim_key = status(base)["peer_id"]
    fingerprint, x = read_state(base, swarm_name, source=source_ip(990))

    clean, clean_published = window(base, None, victim_key)
    sybils = Sybils(attacker, swarm_name, fingerprint, x)
    sybils.contact(base)
    arriving, arriving_published = window(base, sybils, victim_key)
    after, after_published = window(base, sybils, victim_key)
    barren = metric(base, "gossip_tts_partners_barren_total")
    to_sybils = sybils.asked.get(victim_key, 0)
    per_publish = clean / max(clean_published, 1)
    first, second = (arriving / max(arriving_published, 1)) / per_publish, (after / max(after_published, 1)) / per_publish
    print(f"the victim's exchanges with honest peers per {WINDOW_S:g} s: clean {clean:.0f} ({clean_published:.0f} "
          f"publishes); as {SYBILS} sybils arrive {arriving:.0f} ({arriving_published:.0f}), {first:.2f}x per publish; "
          f"after {after:.0f} ({after_published:.0f}), {second:.2f}x. Pulls the sybils answered: {to_sybils} from the "
          f"victim, {sum(sybils.asked.values()) - to_sybils} from the honest peers; partners replaced as barren: {barren:.0f}")
    assert to_sybils >= SYBILS  # each sybil was verified and pulled: the attack reached the victim
    assert second >= 0.8, (first, second)
    # as they arrive: honest exchanges lost, at the clean pace per publish, within the sybils' barren answers
    lost = per_publish * arriving_published - arriving
    assert lost <= PartnerConfig().barren_answers * SYBILS + 0.1 * clean, (lost, first, second)
