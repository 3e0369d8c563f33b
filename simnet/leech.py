"""The snapshot leech: a stranger that opens exchanges only to be sent the model.

A first contact costs its sender a few hundred bytes and used to be answered with a full
snapshot of the receiver's public copy (4 bytes a parameter). The leech sends `leech_rate`
such requests a second, each from a fresh key naming the attacker's own (real) listen
address, and spends the ticket each answer offers in a second request that claims to hold
none of the receiver's copy: the most a stranger can ask for. It reads nothing of what it
gets but its size. Honest peers defend with production code (`peer.core.snapshots`): a
first contact gets a ticket and no snapshot, and a ticketed asker only one whose listen
address the session verified for that key, within the token buckets.

Control arm (`attack.undefended`): the honest nodes answer every asker with a snapshot
(`SnapshotsToAnyoneNode`), as before the budget.
"""

from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING, Any, Callable

from peer.core.control import Control, make_control, read_control
from peer.core.node import GossipNode
from protocol import FrameRefused, Identity, bundle_digest, decode_frame, pack_bundle, unpack_bundle

if TYPE_CHECKING:
    from simnet.attacks import AttackConfig
    from simnet.sim_peer import SimPeer


class SnapshotsToAnyoneNode(GossipNode):
    """Control arm of `leech`: every answer carries our snapshot where the asker lacks our copy,
    ticketed or not, verified or not, however often it asks."""

    def _frames_for(self, peer_key: bytes | None, now: float, withheld: Callable[[bool], str | None] | None,
                    ) -> list[bytes]:
        return super()._frames_for(peer_key, now, None)


class Leech:
    """One attacker's stream of leeching requests (a Poisson stream at `leech_rate`)."""

    def __init__(self, cfg: "AttackConfig", seed: int, index: int, http_overhead: int) -> None:
        """`http_overhead`: the bytes simnet adds to every request for its HTTP framing."""
        self.cfg, self.seed, self.index, self.http_overhead = cfg, seed, index, http_overhead
        self._keys = 0
        self._rng = random.Random(f"simnet-leech:{seed}:{index}")

    def flood(self, peer: "SimPeer", life: int) -> None:
        """Open the next leeching pair of requests to a random online peer, then schedule the next."""
        if life != peer.life or not peer.online or peer.node is None:
            return
        victims = [p for p in peer.sim.peers if p.index != self.index and p.online and p.node is not None]
        if victims:
            self._keys += 1
            key = hashlib.blake2b(f"simnet-leech-key:{self.seed}:{self.index}:{self._keys}".encode(), digest_size=32)
            self._ask(peer, self._rng.choice(victims), Identity.generate(key.digest()), ticket=0, to_epoch=0)
        peer.sim.sched.after(self._rng.expovariate(self.cfg.leech_rate), lambda: self.flood(peer, life))

    def _ask(self, peer: "SimPeer", victim: "SimPeer", identity: Identity, *, ticket: int, to_epoch: int) -> None:
        """Send one request from `identity`; on a first contact's answer, spend its ticket once."""
        node, target = peer.node, victim.node
        assert node is not None and target is not None
        body = self.body(node, identity, target.identity.public_key, to_epoch=to_epoch, ticket=ticket,
                         now=peer.sim.clock())
        peer.metrics.inc("leech_requests_total")

        def answered(data: bytes | None, why: str) -> None:
            if data is None or not peer.online or peer.node is None:
                return
            peer.metrics.inc("leech_bytes_total", len(data))
            offer, epoch, frames = self.read_answer(peer.node, data, peer.sim.clock())
            peer.metrics.inc("leech_snapshots_total", frames)
            if ticket == 0 and offer and victim.node is not None:
                self._ask(peer, victim, identity, ticket=offer, to_epoch=epoch)

        peer.sim.links.send(self.index, victim.index, len(body) + self.http_overhead,
                            lambda: victim.serve_exchange(self.index, body, answered))

    @staticmethod
    def body(node: GossipNode, identity: Identity, to: bytes, *, to_epoch: int, ticket: int, now: float) -> bytes:
        """A control-only exchange from `identity` claiming to hold none of the receiver's copy."""
        control = Control(epoch=1, listen=node.listen, have_epoch=0, have_seq=-1, offer=0, reply=0,
                          bundle=bundle_digest([]))
        frame = make_control(identity, control, swarm=node.cfg.swarm, fingerprint=node.fingerprint, seq=1 + (ticket > 0),
                             step=node.step, now=now, to=to, to_epoch=to_epoch, ticket=ticket, limits=node.limits)
        return pack_bundle([frame])

    @staticmethod
    def read_answer(node: GossipNode, data: bytes, now: float) -> tuple[int, int, int]:
        """(the ticket the answer offers, the answerer's epoch, how many frames came after its control frame)."""
        try:
            frames = unpack_bundle(data, node.limits)
            header = decode_frame(frames[0], node.policy, now=now).header
            info = read_control(header)
        except (FrameRefused, ValueError, IndexError):
            return 0, 0, 0
        return info.offer, info.epoch, len(frames) - 1


def leech_node(*args: Any, **kwargs: Any) -> GossipNode:
    """The node an honest peer of the leech control arm runs."""
    return SnapshotsToAnyoneNode(*args, **kwargs)
