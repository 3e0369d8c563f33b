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
from typing import Any, Callable

from peer.core.control import Control, make_control, read_control
from peer.core.node import GossipNode
from protocol import FrameRefused, Identity, bundle_digest, decode_frame, pack_bundle, unpack_bundle
from simnet.attacks.peers import FloodingPeer
from simnet.driver.sim_peer import SimPeer
from simnet.driver.sim_server import HTTP_OVERHEAD
from simnet.world.sim_world import Host


class SnapshotsToAnyoneNode(GossipNode):
    """Control arm of `leech`: every answer carries our snapshot where the asker lacks our copy,
    ticketed or not, verified or not, however often it asks."""

    def _frames_for(self, peer_key: bytes | None, now: float, withheld: Callable[[bool], str | None] | None,
                    ) -> list[bytes]:
        return super()._frames_for(peer_key, now, None)


class SnapshotsToAnyonePeer(SimPeer):
    """The honest peer of the leech control arm."""

    def _make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        return SnapshotsToAnyoneNode(*args, **kwargs)


class LeechPeer(FloodingPeer):
    """Sends `leech_rate` leeching pairs of requests a second, each from a fresh key."""

    stream = "leech"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._keys = 0

    def _rate(self) -> float:
        return self.attack.leech_rate

    def _send(self, j: int) -> None:
        """Open one leeching pair of requests to slot `j` from a fresh key."""
        self._keys += 1
        key = hashlib.blake2b(f"simnet-leech-key:{self.world.seed}:{self.index}:{self._keys}".encode(),
                              digest_size=32)
        self._ask(self.world.book.host(j), Identity.generate(key.digest()), ticket=0, to_epoch=0)

    def _ask(self, victim: Host, identity: Identity, *, ticket: int, to_epoch: int) -> None:
        """Send one request from `identity`; on a first contact's answer, spend its ticket once."""
        body = leech_body(self._node(), identity, victim.public_key, to_epoch=to_epoch, ticket=ticket,
                          now=self.world.clock())
        self.metrics.inc("leech_requests_total")

        def answered(data: bytes | None, why: str) -> None:
            if data is None or not self.online or self.node is None:
                return
            self.metrics.inc("leech_bytes_total", len(data))
            offer, epoch, frames = read_answer(self.node, data, self.world.clock())
            self.metrics.inc("leech_snapshots_total", frames)
            if ticket == 0 and offer:
                self._ask(victim, identity, ticket=offer, to_epoch=epoch)

        self.world.links.send(self.index, victim.index, len(body) + HTTP_OVERHEAD,
                              lambda: victim.serve_exchange(self.index, body, answered))


def leech_body(node: GossipNode, identity: Identity, to: bytes, *, to_epoch: int, ticket: int, now: float) -> bytes:
    """A control-only exchange from `identity` claiming to hold none of the receiver's copy."""
    control = Control(epoch=1, listen=node.listen, have_epoch=0, have_seq=-1, offer=0, reply=0,
                      bundle=bundle_digest([]))
    frame = make_control(identity, control, swarm=node.cfg.swarm, fingerprint=node.fingerprint, seq=1 + (ticket > 0),
                         step=node.step, now=now, to=to, to_epoch=to_epoch, ticket=ticket, limits=node.limits)
    return pack_bundle([frame])


def read_answer(node: GossipNode, data: bytes, now: float) -> tuple[int, int, int]:
    """(the ticket the answer offers, the answerer's epoch, how many frames came after its control frame)."""
    try:
        frames = unpack_bundle(data, node.limits)
        header = decode_frame(frames[0], node.policy, now=now).header
        info = read_control(header)
    except (FrameRefused, ValueError, IndexError):
        return 0, 0, 0
    return info.offer, info.epoch, len(frames) - 1
