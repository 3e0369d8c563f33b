"""`peer.startup.build_peer` builds a peer whole: resumed, its final configs derived, every part
made before `run()`, which only starts them."""

from __future__ import annotations

import ast
import dataclasses

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.local.loop import LoopConfig
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from peer.net.config import NetConfig
from peer.net.driver import AsyncDriver
from peer.net.http_server import HttpServer
from peer.net.node_worker import NodeWorker
from peer.runtime import GossipPeer, PeerParts
from peer.startup import build_peer
from protocol import Identity
from tests.paths import REPO
from tests.source_ast import parse

GOSSIP = GossipConfig(swarm="startup-test", gossip_every=2, compression="identity")
NET = NetConfig(listen="127.0.0.1:0", mdns=False)


def _trainer() -> LeastSquaresTrainer:
    return LeastSquaresTrainer(LeastSquaresConfig(dim=8, samples_per_shard=32, seed=0))


def test_a_built_peer_holds_every_part_before_it_runs(tmp_path) -> None:
    lines: list[str] = []
    peer = build_peer(_trainer(), LoopConfig(checkpoint_dir=tmp_path, max_steps=6, log_every_s=1e9), GOSSIP, NET,
                      Identity.generate(b"\x61" * 32), emit=lines.append, session_cfg=SessionConfig(join=False))
    assert isinstance(peer.node, GossipNode) and isinstance(peer.worker, NodeWorker)
    assert isinstance(peer.driver, AsyncDriver) and isinstance(peer.http, HttpServer)
    assert peer.address == "" and not lines  # built, not started: nothing listens, nothing said
    result = peer.run()
    assert result.steps == 6 and any(line.startswith("listening on http://") for line in lines)
    assert [step for step, _, _ in peer.history.points()] == [1, 2, 3, 4, 5, 6]  # the loop recorded into it


def test_the_builder_derives_the_final_configs_and_resumes_once(tmp_path) -> None:
    other = Identity.generate(b"\x62" * 32)
    keys = tmp_path / "trusted.txt"
    keys.write_text(other.public_key.hex() + "\n")
    ours, lines = Identity.generate(b"\x63" * 32), []
    peer = build_peer(_trainer(), LoopConfig(checkpoint_dir=tmp_path, resume=True), GOSSIP,
                      dataclasses.replace(NET, trusted_keys=keys), ours, emit=lines.append)
    assert peer.gossip_cfg.allowed_keys == {other.public_key, ours.public_key}
    assert peer.node.cfg is peer.gossip_cfg  # the node runs the final config, not the one given
    assert any("private swarm" in line for line in lines) and any("starting fresh" in line for line in lines)
    assert peer.loop_cfg.resume is False  # resumed by the builder; the loop does not again


def test_a_resumed_peer_keeps_the_loss_curve_of_the_run_before(tmp_path) -> None:
    """/v1/status's curve spans the whole run, the part before a --resume included (docs/quickstart.md)."""
    def peer(steps: int, resume: bool) -> GossipPeer:
        return build_peer(_trainer(), LoopConfig(checkpoint_dir=tmp_path, max_steps=steps, resume=resume, log_every_s=1e9),
                          GOSSIP, NET, Identity.generate(b"\x64" * 32), emit=lambda line: None,
                          session_cfg=SessionConfig(join=False))

    peer(5, resume=False).run()
    resumed = peer(9, resume=True)
    assert [step for step, _, _ in resumed.history.points()] == [1, 2, 3, 4, 5]  # before it trains a step
    resumed.run()
    assert [step for step, _, _ in resumed.history.points()] == list(range(1, 10))


def test_gossip_peer_has_no_optional_part_and_no_assert() -> None:
    """Every part is required when the peer is made: nothing waits for `run()` to be built."""
    optional = {f.name for f in dataclasses.fields(PeerParts) if "| None" in str(f.type) or "Optional" in str(f.type)}
    assert optional == {"corpus"}  # a peer may share no corpus; that is not a part built later
    source = REPO / "peer" / "runtime.py"
    peer_class = next(n for n in parse(source).body if isinstance(n, ast.ClassDef) and n.name == GossipPeer.__name__)
    assert not [n for n in ast.walk(peer_class) if isinstance(n, ast.Assert)]
