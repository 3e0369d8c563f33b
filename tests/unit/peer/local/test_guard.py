"""A peer never trains on or saves poison: rollbacks, checkpoints refused when non-finite or
altered, and --resume taking the newest good checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

from peer.local.checkpoint import CheckpointError, checkpoint_path, load_checkpoint, load_newest_good, save_checkpoint
from peer.local.loop import LoopConfig, run_loop
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from peer.trainer import Capabilities


class Poisonable(LeastSquaresTrainer):
    """A least-squares trainer whose parameters turn to NaN at chosen steps."""

    capabilities = Capabilities(probe=True, scale_lr=True)

    def __init__(self, poison_at: set[int]) -> None:
        super().__init__(LeastSquaresConfig(dim=8, samples_per_shard=64, seed=0, lr=0.05))
        self.poison_at, self.lr_scales = poison_at, []

    def step(self):
        stats = super().step()
        if stats.step in self.poison_at:
            self.poison_at.discard(stats.step)
            self.w.fill_(float("nan"))
            stats.loss = float("nan")
        return stats

    def scale_lr(self, factor: float) -> None:
        self.lr_scales.append(factor)
        self.cfg.lr *= factor


def test_a_nan_step_rolls_back_to_the_last_good_state_with_a_lower_rate(tmp_path):
    tr = Poisonable({23})
    lines: list[str] = []
    res = run_loop(tr, LoopConfig(max_steps=40, good_state_every_steps=10, checkpoint_dir=tmp_path, log_every_s=1e9),
                   emit=lines.append)
    assert bool(torch.isfinite(tr.w).all()) and math.isfinite(res.last_loss)
    assert tr.lr_scales == [0.5]
    assert any("rolled back to step 21" in line for line in lines), lines  # kept after steps 1, 11, 21
    tensors, _ = load_checkpoint(tmp_path)  # the final checkpoint is good
    assert all(bool(torch.isfinite(t).all()) for t in tensors.values() if t.is_floating_point())


def test_control_without_the_guard_a_poisoned_run_stays_poisoned(tmp_path):
    tr = Poisonable({23})
    res = run_loop(tr, LoopConfig(max_steps=40, good_state_every_steps=0, checkpoint_dir=tmp_path, log_every_s=1e9),
                   emit=lambda line: None)
    assert not bool(torch.isfinite(tr.w).all()) and not math.isfinite(res.last_loss)
    assert not checkpoint_path(tmp_path).exists()  # and the poison was not saved either


def test_checkpoints_refuse_non_finite_state_and_detect_alteration(tmp_path):
    good = {"w": torch.arange(4.0)}
    save_checkpoint(tmp_path, good, {"step": 1})
    with pytest.raises(CheckpointError, match="non-finite"):
        save_checkpoint(tmp_path, {"w": torch.tensor([1.0, float("nan")])}, {"step": 2})
    assert torch.equal(load_checkpoint(tmp_path)[0]["w"], good["w"])  # the good one is untouched
    raw = bytearray(checkpoint_path(tmp_path).read_bytes())
    raw[-3] ^= 0x40  # flip a bit inside the tensor data
    checkpoint_path(tmp_path).write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="digest"):
        load_checkpoint(tmp_path)


def test_resume_takes_the_newest_good_of_the_last_three(tmp_path):
    for step in range(1, 6):
        save_checkpoint(tmp_path, {"w": torch.full((3,), float(step))}, {"step": step})
    assert [checkpoint_path(tmp_path, age).exists() for age in range(4)] == [True, True, True, False]
    checkpoint_path(tmp_path).write_bytes(b"truncated")
    tensors, meta, path, skipped = load_newest_good(tmp_path)
    assert meta["step"] == 4 and path == checkpoint_path(tmp_path, 1) and len(skipped) == 1
    for age in range(3):
        checkpoint_path(tmp_path, age).write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="unreadable"):
        load_newest_good(tmp_path)


def test_scalar_and_integer_tensors_round_trip_with_their_digest(tmp_path):
    tensors = {"step": torch.tensor(7.0), "count": torch.tensor(3), "half": torch.ones(2, dtype=torch.bfloat16)}
    save_checkpoint(tmp_path, tensors, {"step": 7})
    loaded, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 7 and all(torch.equal(loaded[k], v) for k, v in tensors.items())
