"""Which peer each slot runs: an attacker of its run's kind, a control arm's honest peer, or a plain honest one."""

from __future__ import annotations

import dataclasses

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from protocol import Identity
from simnet.attacks.leech import LeechPeer, SnapshotsToAnyonePeer
from simnet.attacks.peers import (
    AttackerPeer, FuturePeer, JoinLiarPeer, NanPeer, SlotSybilPeer, SybilPeer, TimestampTrustingPeer, UnprobingPeer,
    UnscoringPeer, UnverifyingPeer,
)
from simnet.attacks.trainer import AttackConfig
from simnet.driver.sim_peer import SimPeer
from simnet.world.sim_world import SimWorld

ATTACKERS: dict[str, type[AttackerPeer]] = {"nan": NanPeer, "future": FuturePeer, "join_liar": JoinLiarPeer,
                                            "sybil": SybilPeer, "leech": LeechPeer, "slot_sybil": SlotSybilPeer}
"""Attack kinds that change more than the trainer; every other kind is an `AttackerPeer`."""
CONTROLS: dict[str, type[SimPeer]] = {"future": TimestampTrustingPeer, "join_liar": UnprobingPeer,
                                      "sybil": UnverifyingPeer, "leech": SnapshotsToAnyonePeer,
                                      "slot_sybil": UnscoringPeer}
"""The honest peer of each `undefended` control arm."""


def build_peer(world: SimWorld, index: int, identity: Identity, gossip_cfg: GossipConfig,
               session_cfg: SessionConfig, attack: AttackConfig, attacker: bool) -> SimPeer:
    """Slot `index`'s peer: an attacker of `attack.kind`, a control arm's honest peer, or a plain honest one."""
    if attacker:
        if attack.pushy:  # it pulls every partner at every publish
            session_cfg = dataclasses.replace(session_cfg, pulls_per_publish=session_cfg.max_partners,
                                              max_in_flight=session_cfg.max_partners)
        return ATTACKERS.get(attack.kind, AttackerPeer)(world, index, identity, gossip_cfg, session_cfg, attack)
    if attack.pushy_undefended:  # honest peers let pushed copies pull
        gossip_cfg = dataclasses.replace(gossip_cfg, pull_only=False)
    honest = CONTROLS[attack.kind] if attack.undefended else SimPeer
    return honest(world, index, identity, gossip_cfg, session_cfg)
