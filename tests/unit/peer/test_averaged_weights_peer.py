"""A real peer (and a solo one) writes its averaged weights into every checkpoint and, resumed,
goes on averaging from them rather than from the live parameters."""

from __future__ import annotations

import threading
import time

import torch

from peer.local.averaged_weights import SoloAverage
from peer.local.checkpoint import AVERAGE_PREFIX, load_checkpoint
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.local.loop import LoopConfig, run_loop
from peer.net.config import NetConfig
from peer.runtime import GossipPeer
from peer.startup import build_peer
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from protocol import Identity
from tests.unit.driver_helpers import wait_for_line

GOSSIP = GossipConfig(swarm="average-test", gossip_every=2, compression="identity")
STEP_S = 0.002
"""Each toy step takes this long, so the node worker finishes publishes while the peer trains
(a bare toy step is microseconds: a run of 20 could end before the first publish did)."""


class PacedTrainer(LeastSquaresTrainer):
    def step(self):
        time.sleep(STEP_S)
        return super().step()


def _trainer() -> LeastSquaresTrainer:
    return PacedTrainer(LeastSquaresConfig(dim=16, shard=0, n_shards=1, heterogeneity=0.0, seed=3, lr=0.2))


def _peer(tmp_path, steps: int, resume: bool, emit=lambda line: None, join: bool = False) -> GossipPeer:
    # joining, it asks an address where nobody listens (port 9 on loopback) and waits its timeout
    return build_peer(_trainer(), LoopConfig(checkpoint_dir=tmp_path, max_steps=steps, resume=resume), GOSSIP,
                      NetConfig(listen="127.0.0.1:0", mdns=False, peers=["127.0.0.1:9"] if join else []),
                      Identity.generate(b"\x41" * 32), emit=emit,
                      session_cfg=SessionConfig(join=join, join_timeout_s=60.0))


def test_a_peer_checkpoints_its_average_and_restores_it_on_resume(tmp_path) -> None:
    _peer(tmp_path, 20, resume=False).run()
    tensors, meta = load_checkpoint(tmp_path)
    first, step = tensors[AVERAGE_PREFIX + "w"], meta["average"]["step"]
    # as of the last publish the node worker finished (publishing never holds training up); publishes
    # are gossip_every steps apart, or more where the worker was still busy with the last one
    assert GOSSIP.gossip_every <= step <= 20
    assert not torch.equal(first, tensors["w"])  # it lags the live weights

    resumed = _peer(tmp_path, 20, resume=True)  # already at step 20: trains nothing, publishes nothing
    resumed.run()
    tensors, meta = load_checkpoint(tmp_path)
    assert meta["average"]["step"] == step and torch.equal(tensors[AVERAGE_PREFIX + "w"], first)


def test_a_solo_peer_checkpoints_its_average_and_continues_it_after_a_resume(tmp_path) -> None:
    def solo_run(steps: int, resume: bool) -> SoloAverage:
        trainer = _trainer()
        solo = SoloAverage(GOSSIP, trainer.param_spec())
        run_loop(trainer, LoopConfig(checkpoint_dir=tmp_path, max_steps=steps, resume=resume), hooks=[solo],
                 emit=lambda line: None, extra_state=solo.state, restore_extra=solo.restore)
        return solo

    solo_run(20, resume=False)
    tensors, meta = load_checkpoint(tmp_path)
    first = tensors[AVERAGE_PREFIX + "w"]
    assert meta["average"]["step"] == 20 and not torch.equal(first, tensors["w"])
    solo = solo_run(22, resume=True)
    tensors, meta = load_checkpoint(tmp_path)
    beta = (20 / 22) ** (solo.average.ema.gamma + 1)
    # one sample after the resume, folded into the saved average (not into step 20's live weights)
    assert meta["average"]["step"] == 22
    # within the packed average's 16-bit significand (GossipConfig.average_dtype)
    torch.testing.assert_close(tensors[AVERAGE_PREFIX + "w"], beta * first + (1 - beta) * tensors["w"], rtol=2**-14, atol=1e-6)


def test_a_peer_stopped_while_joining_keeps_the_average_it_resumed_with(tmp_path) -> None:
    _peer(tmp_path, 20, resume=False).run()
    tensors, meta = load_checkpoint(tmp_path)
    saved, saved_step = tensors[AVERAGE_PREFIX + "w"], meta["average"]["step"]
    lines: list[str] = []
    stop = threading.Event()
    resumed = _peer(tmp_path, 40, resume=True, emit=lines.append, join=True)
    thread = threading.Thread(target=lambda: lines.append(repr(resumed.run(stop))), daemon=True)
    thread.start()
    wait_for_line(lines, r"listening on http://")
    stop.set()  # while it still waits for an answer to its join
    thread.join(60)
    assert not thread.is_alive() and any("stopped while joining" in line for line in lines), lines
    tensors, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 20  # it trained nothing
    assert meta["average"]["step"] == saved_step and torch.equal(tensors[AVERAGE_PREFIX + "w"], saved)
