"""A peer that joins a running swarm and adopts a neighbour's state counts on from that state's
step: its progress lines, /v1/status curve, hellos and checkpoints all say how much training its
parameters hold, not how many steps it took since it joined."""

from __future__ import annotations

import threading

from peer.local.checkpoint import load_checkpoint
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.local.loop import LoopConfig
from peer.net.config import NetConfig
from peer.startup import build_peer
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from protocol import Identity
from tests.unit.driver_helpers import wait_for_line

GOSSIP = GossipConfig(swarm="adopted-steps", gossip_every=2, compression="identity")


def _trainer(shard: int) -> LeastSquaresTrainer:
    return LeastSquaresTrainer(LeastSquaresConfig(dim=16, shard=shard, n_shards=2, heterogeneity=0.0, seed=shard))


def test_a_joiner_counts_on_from_the_step_of_the_state_it_adopted(tmp_path) -> None:
    server_stop, server_lines = threading.Event(), []
    server = build_peer(_trainer(0), LoopConfig(log_every_s=0.2), GOSSIP, NetConfig(listen="127.0.0.1:0", mdns=False),
                        Identity.generate(b"\x51" * 32), emit=server_lines.append, session_cfg=SessionConfig(join=False))
    thread = threading.Thread(target=server.run, args=(server_stop,), daemon=True)
    thread.start()
    try:
        address = wait_for_line(server_lines, r"listening on http://(\S+) ").group(1)
        wait_for_line(server_lines, r"^step (?:[3-9]\d|\d{3,}) ")  # well past step 0: worth joining
        lines: list[str] = []
        joiner_trainer = _trainer(1)
        joiner = build_peer(joiner_trainer, LoopConfig(checkpoint_dir=tmp_path, log_every_s=1e9), GOSSIP,
                            NetConfig(listen="127.0.0.1:0", mdns=False, peers=[address]), Identity.generate(b"\x52" * 32),
                            emit=lines.append, session_cfg=SessionConfig(join=True, join_timeout_s=30))
        stop = threading.Event()
        run = threading.Thread(target=joiner.run, args=(stop,), daemon=True)
        run.start()
        adopted = int(wait_for_line(lines, r"joined: adopted the state of \S+ \(its step \d+\), counting on from step (\d+)").group(1))
        assert adopted >= 30
        first = wait_for_line(lines, r"^step (\d+) ")  # the first progress line comes after the first step
        while len(joiner.history.points()) < 5 and run.is_alive():
            stop.wait(0.05)
        stop.set()
        run.join(30)
    finally:
        server_stop.set()
        thread.join(30)
    assert int(first.group(1)) == adopted + 1  # was 1: the joiner counted from the start again
    curve = [step for step, _, _ in joiner.history.points()]
    assert curve[0] == adopted + 1 and curve == sorted(curve)
    assert joiner.metrics.get("steps") == joiner_trainer.step_count > adopted
    assert joiner.driver is not None and joiner.driver.session.step == joiner_trainer.step_count  # what hellos claim
    assert load_checkpoint(tmp_path)[1]["step"] == joiner_trainer.step_count  # a --resume goes on from there
