"""The wire side of simulated attacks, and the control arms that drop one defence.

`simnet.attacks` says who attacks and what an attacker's trainer shows; this module is
what `simnet.sim_peer` asks at the few points where an attack (or its control) touches
the driver: which node class a peer runs, what it appends to an exchange body, which step
its hellos claim, which state it serves, whether a joiner probes an offered state, and how
an inbound exchange's listen address is admitted. Attackers sign everything with their
own keys and send well-formed frames, so honest peers defend with production code.

Control arms (`attack.undefended`), each the one honest switch its attack targets:
- future: honest nodes take a frame's claimed timestamp as its publish time
  (`TimestampTrustingNode`) instead of min(claimed, received);
- join_liar: honest joiners adopt the furthest-along state without probing it;
- sybil: honest peers take an inbound exchange's listen address as verified at once,
  without dialling it for a hello signed over their nonce;
- leech: honest peers answer every asker with a snapshot (`simnet.leech`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from typing import TYPE_CHECKING, Any, Callable

import torch

from peer.core.actions import Action, Count
from peer.core.addresses import PeerInfo
from peer.core.config import SessionConfig
from peer.core.control import make_control, read_control
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.session import Session
from protocol import (
    Frame, FrameHeader, FrameKind, Identity, IdentityCodec, TensorSpec, bundle_digest, decode_frame, encode_frame,
    make_control_frame, pack_bundle, unpack_bundle,
)
from simnet.attacks import AttackConfig
from simnet.leech import Leech, leech_node
from simnet.sim_server import HTTP_OVERHEAD

if TYPE_CHECKING:
    from simnet.sim_peer import SimPeer

class FutureClockNode(GossipNode):
    """An attacker's node whose frames claim a time `lead_s` ahead; it reads what it receives on the true clock.

    It overrides every place the node stamps a frame with `now` (publish, state, the control
    frame, snapshots for a gap); ingestion keeps the true clock, so what it receives still
    passes its own skew check.
    """

    lead_s = 0.0

    def publish(self, x: torch.Tensor, step: int, now: float) -> int:
        return super().publish(x, step, now + self.lead_s)

    def state_frame(self, now: float) -> bytes:
        return super().state_frame(now + self.lead_s)

    def _control_frame(self, peer_key: bytes | None, now: float, *args: Any, **kwargs: Any) -> bytes:
        return super()._control_frame(peer_key, now + self.lead_s, *args, **kwargs)

    def _frames_for(self, peer_key: bytes | None, now: float, *args: Any, **kwargs: Any) -> list[bytes]:
        return super()._frames_for(peer_key, now + self.lead_s, *args, **kwargs)


class TimestampTrustingNode(GossipNode):
    """Control arm of `future`: takes a frame's claimed timestamp as when it was published.

    The core keeps min(claimed, received), so a claim from the future buys no freshness;
    this node believes the claim, so such a copy counts as never stale.
    """

    def _apply(self, n: Any, frame: Frame, now: float) -> bool:
        before = n.published_at
        changed = super()._apply(n, frame, now)
        if changed and n.copy.x_hat is not None:
            claimed = frame.header.timestamp
            n.published_at = claimed if frame.header.kind == FrameKind.SNAPSHOT else max(before, claimed)
        return changed


class JoinLiarNode(GossipNode):
    """Serves /v1/state as its parameters plus noise, signed, claiming step `claim_step`."""

    claim_step = 1
    noise = 0.0
    generator: torch.Generator

    @property
    def state_cached(self) -> bool:
        return False

    def state_frame(self, now: float) -> bytes:
        """The production state frame, built over the lie (a fresh draw of noise each time)."""
        honest, step = self.last_x, self.step
        rms = float(honest.pow(2).mean().sqrt()) or 1.0
        self.last_x = honest + self.noise * rms * torch.randn(honest.shape, generator=self.generator)
        self.step, self._state_cache = self.claim_step, None
        try:
            return super().state_frame(now)
        finally:
            self.last_x, self.step, self._state_cache = honest, step, None


class PeerAttack:
    """What one simulated peer's attack (or its run's control arm) changes in the driver."""

    def __init__(self, cfg: AttackConfig, *, attacker: bool, seed: int, index: int) -> None:
        self.cfg, self.attacker, self.seed, self.index = cfg, attacker, seed, index
        self.kind = cfg.kind if attacker else "none"
        self.control = cfg.undefended and not attacker
        """This honest peer runs without the defence its run's attack targets."""
        self._sybils = 0
        self._sybil_rng = random.Random(f"simnet-sybil:{seed}:{index}")
        self._leech = Leech(cfg, seed, index, HTTP_OVERHEAD) if self.kind == "leech" else None

    def session_config(self, cfg: SessionConfig) -> SessionConfig:
        """The session this peer runs: a pushy attacker pulls every partner at every publish."""
        if not (self.attacker and self.cfg.pushy):
            return cfg
        return dataclasses.replace(cfg, pulls_per_publish=cfg.max_partners, max_in_flight=cfg.max_partners)

    def gossip_config(self, cfg: GossipConfig) -> GossipConfig:
        """The gossip settings this peer runs: in `pushy_undefended`, honest peers let pushed copies pull."""
        if self.attacker or not self.cfg.pushy_undefended:
            return cfg
        return dataclasses.replace(cfg, pull_only=False)

    def make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        """The node this peer runs: the production one, or an attacker's or control arm's variant."""
        if self.kind == "future":
            node: GossipNode = FutureClockNode(*args, **kwargs)
            node.lead_s = self.cfg.ahead_s
        elif self.kind == "join_liar":
            node = JoinLiarNode(*args, **kwargs)
            node.claim_step, node.noise = self.cfg.claim_step, self.cfg.scale
            node.generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.index)
        elif self.control and self.cfg.kind == "future":
            node = TimestampTrustingNode(*args, **kwargs)
        elif self.control and self.cfg.kind == "leech":
            node = leech_node(*args, **kwargs)
        else:
            node = GossipNode(*args, **kwargs)
        return node

    def outgoing(self, body: bytes, node: GossipNode, now: float) -> tuple[bytes, bool]:
        """An exchange body as the attacker sends it, and whether a frame was forged into it.

        The NaN attacker appends a NaN update and signs its control frame again to bind it, as
        any sender may bind what it likes: receivers then decode the frame and refuse it for
        its values (`non_finite`), not for being unbound. It forges only into requests that
        spend a ticket: of a first contact the receiver decodes nothing."""
        if self.kind != "nan":
            return body, False
        frames = unpack_bundle(body, node.limits)
        header = decode_frame(frames[0], node.policy, now).header
        if not header.ticket:
            return body, False
        frames = frames[1:] + [forge_non_finite_update(node, now)]
        control = dataclasses.replace(read_control(header), bundle=bundle_digest(frames))
        rebound = make_control(node.identity, control, swarm=header.swarm, fingerprint=header.fingerprint,
                               seq=header.seq, step=header.step, now=header.timestamp, to=header.to,
                               to_epoch=header.to_epoch, ticket=header.ticket, limits=node.limits)
        return pack_bundle([rebound, *frames]), True

    def hello_step(self, step: int) -> int:
        """The step our hellos claim (a join liar claims to be far ahead)."""
        return self.cfg.claim_step if self.kind == "join_liar" else step

    def probe(self, trainer: Any) -> Callable[[torch.Tensor], bool] | None:
        """How a joiner judges an offered state (as the real driver: the trainer's `probe_better`)."""
        if self.control and self.cfg.kind == "join_liar":
            return None
        return getattr(trainer, "probe_better", None)

    def inbound(self, session: Session, listen: str, peer_id: str, now: float) -> list[Action]:
        """The session's answer to an inbound exchange naming `listen`; the sybil control admits it unverified."""
        if not (self.control and self.cfg.kind == "sybil") or not listen:
            return session.inbound_exchange(listen, peer_id, now)
        try:
            info = PeerInfo(peer_id=peer_id, address=listen, source="exchange")
        except ValueError:
            return [Count("inbound_bad_listen_total")]
        session.table.add(info, now)
        session.table.mark_success(listen, now, peer_id=peer_id)
        return [Count("admitted_unverified_total")]

    # ------------------------------------------------------------------ sybils
    @property
    def floods(self) -> bool:
        return self.kind in ("sybil", "leech")

    def flood(self, peer: "SimPeer", life: int) -> None:
        """Send `peer`'s next sybil request (a Poisson stream at `sybil_rate`; its answer is dropped),
        or its next leeching one (`simnet.leech`)."""
        if self._leech is not None:
            self._leech.flood(peer, life)
            return
        if life != peer.life or not peer.online or peer.node is None:
            return
        j = self._sybil_rng.choice([i for i in range(len(peer.sim.peers)) if i != self.index])
        body = self.sybil_body(peer.node, peer.sim.clock())
        peer.metrics.inc("sybil_requests_total")
        peer.sim.links.send(self.index, j, len(body) + HTTP_OVERHEAD,
                            lambda: peer.sim.peers[j].serve_exchange(self.index, body, lambda data, why: None))
        peer.sim.sched.after(self._sybil_rng.expovariate(self.cfg.sybil_rate), lambda: self.flood(peer, life))

    def sybil_body(self, node: GossipNode, now: float) -> bytes:
        """A control-only exchange from a fresh key, naming a fresh made-up listen address."""
        self._sybils += 1
        seed = hashlib.blake2b(f"simnet-sybil-key:{self.seed}:{self.index}:{self._sybils}".encode(), digest_size=32)
        identity = Identity.generate(seed.digest())
        listen = f"s{self.index}-{self._sybils}.sybil.invalid:7000"  # nothing listens there
        frame = make_control_frame(
            identity, kind=FrameKind.ACK, swarm=node.cfg.swarm, fingerprint=node.fingerprint, seq=1,
            step=node.step, timestamp=now, extra={"epoch": 1, "listen": listen, "have_epoch": 0, "have_seq": -1},
            limits=node.limits,
        )
        return pack_bundle([frame])


def forge_non_finite_update(node: GossipNode, now: float) -> bytes:
    """An update frame full of NaN, correctly signed by the node's own key.

    It bypasses the sender-side check of `make_update_frame` (an attacker is not bound to
    use the honest encoder); receivers must refuse it on their own.
    """
    delta = torch.full((node.numel,), float("nan"))
    packed, _ = IdentityCodec().compress(delta)
    header = FrameHeader(
        swarm=node.cfg.swarm, fingerprint=node.fingerprint, sender=node.identity.public_key,
        kind=FrameKind.UPDATE, seq=node.public.seq + 1, step=node.step, timestamp=now,
        codec="identity", tensors=(TensorSpec("delta", (node.numel,), "float32"),), extra={"epoch": node.epoch},
    )
    return encode_frame(node.identity, header, {f"delta/{k}": v for k, v in packed.items()}, node.limits)
