"""A peer stopped (Ctrl+C, SIGTERM) while it adopts a joined state stops cleanly: its final
checkpoint holds the whole adopted state, never parameters half replaced. The interleaving is
forced: the adoption stops half way until a checkpoint reads the trainer (or 2 s pass)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from peer.local.checkpoint import load_checkpoint
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.local.loop import LoopConfig
from peer.net.config import NetConfig
from peer.startup import build_peer
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from protocol import Identity
from tests.unit.driver_helpers import wait_for_line

DIM = 64
GOSSIP = GossipConfig(swarm="stop-test", gossip_every=2, compression="identity")


class HalfwayAdoption(LeastSquaresTrainer):
    """Adopts in two halves, waiting between them for anyone who reads the state."""

    def __init__(self) -> None:
        super().__init__(LeastSquaresConfig(dim=DIM, shard=1, n_shards=2, heterogeneity=0.0, seed=1))
        self.adopting, self.read = threading.Event(), threading.Event()
        self.offered: torch.Tensor | None = None

    def set_flat_params(self, flat: torch.Tensor) -> None:
        self.offered = flat.clone()
        half = DIM // 2
        self.w[:half] = flat[:half]
        self.adopting.set()
        self.read.wait(2.0)  # a checkpoint taken now would hold half of each
        self.w[half:] = flat[half:]

    def state_tensors(self):
        out = super().state_tensors()
        self.read.set()
        return out


class StopWhileAdopting(threading.Event):
    """The stop signal arrives while the adoption is half way: Ctrl+C raises, SIGTERM sets.
    (If no adoption begins within 60 s it stops anyway, and the test fails instead of hanging.)"""

    def __init__(self, trainer: HalfwayAdoption, how: str) -> None:
        super().__init__()
        self.trainer, self.how, self.fired = trainer, how, False
        self.deadline = time.monotonic() + 60

    def is_set(self) -> bool:
        if time.monotonic() > self.deadline:
            self.set()
        if self.trainer.adopting.is_set() and not self.fired:
            self.fired = True
            if self.how == "ctrl_c":
                raise KeyboardInterrupt
            self.set()
        return super().is_set()


def _serving_peer(stop: threading.Event) -> tuple[threading.Thread, list[str]]:
    """A peer that trains and serves its state (not joining), already some steps along."""
    lines: list[str] = []
    trainer = LeastSquaresTrainer(LeastSquaresConfig(dim=DIM, shard=0, n_shards=2, heterogeneity=0.0, seed=0))
    peer = build_peer(trainer, LoopConfig(log_every_s=0.2), GOSSIP, NetConfig(listen="127.0.0.1:0", mdns=False),
                      Identity.generate(b"\x31" * 32), emit=lines.append, session_cfg=SessionConfig(join=False))
    thread = threading.Thread(target=peer.run, args=(stop,), daemon=True)
    thread.start()
    return thread, lines


@pytest.mark.parametrize("how", ["ctrl_c", "sigterm"])
def test_a_stop_during_adoption_checkpoints_the_whole_adopted_state(tmp_path, how: str) -> None:
    server_stop = threading.Event()
    server, server_lines = _serving_peer(server_stop)
    try:
        address = wait_for_line(server_lines, r"listening on http://(\S+) ").group(1)
        wait_for_line(server_lines, r"^step (?:[2-9]\d|\d{3,}) ")  # well past step 0: worth joining
        trainer = HalfwayAdoption()
        own = trainer.get_flat_params()
        lines: list[str] = []
        joiner = build_peer(trainer, LoopConfig(checkpoint_dir=tmp_path), GOSSIP,
                            NetConfig(listen="127.0.0.1:0", mdns=False, peers=[address]),
                            Identity.generate(b"\x32" * 32), emit=lines.append,
                            session_cfg=SessionConfig(join=True, join_timeout_s=30))
        try:
            result = joiner.run(StopWhileAdopting(trainer, how))
        except KeyboardInterrupt:
            pytest.fail("Ctrl+C during the adoption escaped GossipPeer.run without a final checkpoint")
    finally:
        server_stop.set()
        server.join(30)
    assert trainer.offered is not None and not torch.equal(trainer.offered, own)
    adopted = int(wait_for_line(lines, r"counting on from step (\d+)", timeout=1).group(1))
    assert (result.interrupted, result.steps, result.checkpoints_written) == (how == "ctrl_c", adopted, 1)
    saved, meta = load_checkpoint(tmp_path)
    assert torch.equal(saved["w"], trainer.offered) and meta["step"] == adopted  # the whole adopted state
    assert torch.equal(trainer.get_flat_params(), trainer.offered)
