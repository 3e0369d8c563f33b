"""Which peer each slot runs: an attacker of its run's kind, a control arm's honest peer, or a plain honest one."""

from __future__ import annotations

import dataclasses
import importlib

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from protocol import Identity
from simnet.attacks.kinds import attack_named
from simnet.attacks.peers import AttackerPeer
from simnet.attacks.trainer import AttackConfig
from simnet.driver.sim_peer import SimPeer
from simnet.world.sim_world import SimWorld


def peer_class(path: str) -> type[SimPeer]:
    """The class an attack's `module:Class` names (`AttackKind.peer`, `.control`)."""
    module, _, name = path.partition(":")
    cls = vars(importlib.import_module(module)).get(name)
    if not (isinstance(cls, type) and issubclass(cls, SimPeer)):
        raise ValueError(f"{path!r} names no SimPeer class")
    return cls


def build_peer(world: SimWorld, index: int, identity: Identity, gossip_cfg: GossipConfig,
               session_cfg: SessionConfig, attack: AttackConfig, attacker: bool) -> SimPeer:
    """Slot `index`'s peer: an attacker of `attack.kind`, a control arm's honest peer, or a plain honest one."""
    kind = attack_named(attack.kind)
    if attacker:
        assert kind is not None  # a run without attacks has no attackers
        if attack.pushy:  # it pulls every partner at every publish
            session_cfg = dataclasses.replace(session_cfg, pulls_per_publish=session_cfg.max_partners,
                                              max_in_flight=session_cfg.max_partners)
        cls = peer_class(kind.peer) if kind.peer else AttackerPeer
        assert issubclass(cls, AttackerPeer), kind.peer
        return cls(world, index, identity, gossip_cfg, session_cfg, attack)
    if attack.pushy_undefended:  # honest peers let pushed copies pull
        gossip_cfg = dataclasses.replace(gossip_cfg, pull_only=False)
    honest = peer_class(kind.control) if attack.undefended and kind is not None else SimPeer
    return honest(world, index, identity, gossip_cfg, session_cfg)
