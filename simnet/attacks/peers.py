"""Attacking peers and control arms: each a `SimPeer` built with its attack, chosen when the swarm is built.

An honest peer runs `SimPeer` itself, with no attack in its path. An attacker is an
`AttackerPeer`: the real node over the real wire, its trainer wrapped (`AttackTrainer`) so
that what its node reads and publishes lies; the attacks on the protocol override the one
thing they change: the node class (`future`, `nan`, `join_liar`, `slot_sybil`), the step its hellos claim
(`join_liar`) or a stream of made-up requests (`sybil`). Attackers sign everything with their
own keys and send well-formed frames, so honest peers defend with production code.

Control arms (`attack.undefended`) are honest peers built without the one defence their
run's attack targets. Which peer each attack and its control arm run, and what each does, is
the attack table (`simnet.attacks.kinds`).
`pushy` and `pushy_undefended` change only the settings a peer is built with; `simnet.attacks.build`
chooses each slot's peer.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any, Callable

import torch

from peer.core.actions import Action, Count
from peer.core.addresses import PeerInfo
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import ExchangeResult, GossipNode
from peer.core.session import Session
from peer.trainer import Trainer
from protocol import FrameKind, Identity, make_control_frame, pack_bundle
from simnet.attacks.nodes import EmptyAnswerNode, FutureClockNode, JoinLiarNode, NanForgingNode, TimestampTrustingNode
from simnet.attacks.trainer import AttackConfig, AttackTrainer
from simnet.driver.sim_peer import SimPeer
from simnet.driver.sim_server import HTTP_OVERHEAD
from simnet.world.sim_world import SimWorld


class AttackerPeer(SimPeer):
    """A Byzantine peer whose trainer shows its node a lie (the parameter attacks of `simnet.attacks.trainer`)."""

    attacker = True

    def __init__(self, world: SimWorld, index: int, identity: Identity, gossip_cfg: GossipConfig,
                 session_cfg: SessionConfig, attack: AttackConfig) -> None:
        super().__init__(world, index, identity, gossip_cfg, session_cfg)
        self.attack = attack
        self._lying: AttackTrainer | None = None

    def start(self, trainer: Trainer, join: bool) -> None:
        """Come online with the trainer wrapped; the lie starts once the node holds the shared x₀."""
        lying = AttackTrainer(trainer, self.attack, seed=self.world.seed * 1_000_003 + self.index)
        self._lying = lying
        super().start(lying, join)
        view_slot = self._node().view_slot
        lying.arm(lambda: [c.x_hat for c in view_slot.current.copies])

    def honest_params(self) -> torch.Tensor | None:
        """The attacker's honest parameters (what it trains with), not the lie it publishes."""
        if not self.online or self._lying is None:
            return None
        return self._lying.inner.get_flat_params()


class NanPeer(AttackerPeer):
    """Publishes NaN (which its own encoder refuses) and forges a NaN update into its exchange bodies."""

    def _make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        return NanForgingNode(*args, **kwargs)


class FuturePeer(AttackerPeer):
    """Its frames claim a time `ahead_s` ahead of its clock."""

    def _make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        return FutureClockNode(*args, lead_s=self.attack.ahead_s, **kwargs)


class JoinLiarPeer(AttackerPeer):
    """Claims step `claim_step` in its hellos and serves a noisy state claiming it: bait for joiners."""

    def _make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        generator = torch.Generator().manual_seed(self.world.seed * 1_000_003 + self.index)
        return JoinLiarNode(*args, claim_step=self.attack.claim_step, noise=self.attack.scale,
                            generator=generator, **kwargs)

    def _hello_step(self, step: int) -> int:
        return self.attack.claim_step


class SlotSybilPeer(AttackerPeer):
    """A partner-slot sybil: answers every hello and every exchange at once, and never carries a frame
    of its copy, so the partners it is given are pulls that bring nothing."""

    def _make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        return EmptyAnswerNode(*args, **kwargs)


class FloodingPeer(AttackerPeer):
    """An attacker that sends a Poisson stream of requests, each to a random other slot, while online.

    A subclass names its stream (`stream`, which seeds its own random draws), its rate and what
    one request is (`_send`)."""

    stream = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rng = random.Random(f"simnet-{self.stream}:{self.world.seed}:{self.index}")

    def _rate(self) -> float:
        raise NotImplementedError

    def _send(self, j: int) -> None:
        raise NotImplementedError

    def start(self, trainer: Trainer, join: bool) -> None:
        super().start(trainer, join)
        self._flood(self.life)

    def _flood(self, life: int) -> None:
        """Send the next request of the stream, then schedule the one after (until this life ends)."""
        if life != self.life or not self.online or self.node is None:
            return
        others = [i for i in range(len(self.world.book)) if i != self.index]
        if others:
            self._send(self._rng.choice(others))
        self.world.sched.after(self._rng.expovariate(self._rate()), lambda: self._flood(life))


class SybilPeer(FloodingPeer):
    """Sends `sybil_rate` control-only exchanges a second, each from a fresh key naming a made-up address."""

    stream = "sybil"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sybils = 0

    def _rate(self) -> float:
        return self.attack.sybil_rate

    def _send(self, j: int) -> None:
        """One sybil request; its answer is dropped."""
        body = self._sybil_body(self._node(), self.world.clock())
        self.metrics.inc("sybil_requests_total")
        server = self.world.book.host(j)
        self.world.links.send(self.index, j, len(body) + HTTP_OVERHEAD,
                              lambda: server.serve_exchange(self.index, body, lambda data, why: None))

    def _sybil_body(self, node: GossipNode, now: float) -> bytes:
        """A control-only exchange from a fresh key, naming a fresh made-up listen address."""
        self._sybils += 1
        seed = hashlib.blake2b(f"simnet-sybil-key:{self.world.seed}:{self.index}:{self._sybils}".encode(),
                               digest_size=32)
        identity = Identity.generate(seed.digest())
        listen = f"s{self.index}-{self._sybils}.sybil.invalid:7000"  # nothing listens there
        frame = make_control_frame(
            identity, kind=FrameKind.ACK, swarm=node.cfg.swarm, fingerprint=node.fingerprint, seq=1,
            step=node.step, timestamp=now, extra={"epoch": 1, "listen": listen, "have_epoch": 0, "have_seq": -1},
            limits=node.limits,
        )
        return pack_bundle([frame])


class TimestampTrustingPeer(SimPeer):
    """Control arm of `future`: an honest peer whose node believes a frame's claimed timestamp."""

    def _make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        return TimestampTrustingNode(*args, **kwargs)


class UnprobingPeer(SimPeer):
    """Control arm of `join_liar`: an honest joiner that adopts the furthest-along state unprobed."""

    def _judge(self) -> Callable[[torch.Tensor], bool | None] | None:
        return None


class UnscoringPeer(SimPeer):
    """Control arm of `slot_sybil`: an honest peer whose session is not told what answers carried,
    so no partner is scored or replaced for answering nothing."""

    def _answer_news(self, result: ExchangeResult) -> tuple[int | None, bool]:
        return None, True


class UnverifyingPeer(SimPeer):
    """Control arm of `sybil`: an honest peer that takes an inbound exchange's listen address as verified."""

    def _inbound(self, session: Session, listen: str, peer_id: str, now: float, carried: int = 0) -> list[Action]:
        if not listen:
            return super()._inbound(session, listen, peer_id, now, carried)
        try:
            info = PeerInfo(peer_id=peer_id, address=listen, source="exchange")
        except ValueError:
            return [Count("inbound_bad_listen_total")]
        session.table.add(info, now)
        session.table.mark_success(listen, now, peer_id=peer_id)
        return [Count("admitted_unverified_total")]
