"""One entry in the attack table is all a new attack needs: the config accepts it (as a kind, a
`future` payload, a `pushy` lie or an `undefended` control), the trainer publishes its lie, the
swarm builds its peers, and docs/simnet/world.md shows it."""

from pathlib import Path

import pytest
import torch

from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from simnet.attacks import kinds
from simnet.attacks.build import peer_class
from simnet.attacks.kinds import ATTACKS, AttackKind, kind_names, markdown_table, register
from simnet.attacks.peers import AttackerPeer, SybilPeer, UnverifyingPeer
from simnet.attacks.trainer import AttackConfig, AttackTrainer
from simnet.driver.sim_peer import SimPeer
from simnet.runs.config import world_from_dict
from simnet.runs.swarm import GossipSim

ROOT = Path(__file__).resolve().parents[3]


def halve(lie, x):
    return lie.x0 + 0.5 * (x - lie.x0)


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setattr(kinds, "ATTACKS", list(kinds.ATTACKS))


def swarm(attack: dict) -> GossipSim:
    return GossipSim(world_from_dict({"n_peers": 3, "model": "lsq", "duration_s": 1.0, "topology": {"kind": "full"},
                                      "attack": {"peers": [0], **attack}}), seed=0)


def test_a_registered_parameter_attack_is_configured_published_and_built(table):
    register(AttackKind("halve", "publishes x₀ + u/2", halve))
    AttackConfig(kind="halve", pushy=True)
    AttackConfig(kind="future", payload="halve")
    with pytest.raises(ValueError, match="control arm"):
        AttackConfig(kind="halve", undefended=True)
    for cfg in (AttackConfig(kind="halve"), AttackConfig(kind="future", payload="halve")):
        inner = LeastSquaresTrainer(LeastSquaresConfig(dim=4))
        lying = AttackTrainer(inner, cfg, seed=0)
        x0 = lying.get_flat_params()
        lying.arm(lambda: [])
        inner.set_flat_params(x0 + 2.0)
        assert torch.allclose(lying.get_flat_params(), x0 + 1.0)
    sim = swarm({"kind": "halve"})
    assert [type(p) for p in sim.peers] == [AttackerPeer, SimPeer, SimPeer]


def test_a_registered_protocol_attack_builds_its_peer_and_its_control(table):
    register(AttackKind("sybil2", "a second sybil", peer="simnet.attacks.peers:SybilPeer",
                        control="simnet.attacks.peers:UnverifyingPeer", control_about="verifies nothing"))
    with pytest.raises(ValueError, match="parameter attack"):
        AttackConfig(kind="sybil2", pushy=True)
    assert [type(p) for p in swarm({"kind": "sybil2"}).peers] == [SybilPeer, SimPeer, SimPeer]
    assert [type(p) for p in swarm({"kind": "sybil2", "undefended": True}).peers] == [
        SybilPeer, UnverifyingPeer, UnverifyingPeer]
    assert "| `sybil2` | a second sybil | verifies nothing |" in markdown_table()


def test_a_name_is_registered_once(table):
    for name in ("none", "steer"):
        with pytest.raises(ValueError, match="already registered"):
            register(AttackKind(name, "", halve))


def test_every_peer_the_table_names_is_a_simnet_peer_of_its_side():
    assert kind_names() == ("none", "sign_flip", "scale", "random", "alie", "edge", "nan", "steer", "future",
                            "join_liar", "sybil", "leech", "slot_sybil")
    for kind in ATTACKS:
        assert (kind.lie is not None) or kind.publishes_payload or kind.peer, kind.name  # it does something
        if kind.peer:
            assert issubclass(peer_class(kind.peer), AttackerPeer), kind.name
        if kind.control:
            assert not issubclass(peer_class(kind.control), AttackerPeer) and kind.control_about, kind.name
    with pytest.raises(ValueError, match="names no SimPeer"):
        peer_class("simnet.attacks.peers:AttackTrainer")


def test_docs_show_the_table():
    assert markdown_table() in (ROOT / "docs" / "simnet" / "world.md").read_text(), \
        "run `python -m simnet.attacks.kinds` and put its table in docs/simnet/world.md"
