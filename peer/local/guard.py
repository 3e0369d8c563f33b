"""Never train on poison: a non-finite loss or state rolls back to the last good state.

A peer mixes in what strangers send; clipping bounds how far one mix can move it, but a
learning rate that is too high for a noisy batch, or a bug, can still turn the parameters
into NaN. Training on NaN is worse than useless (every later publish fails and, without
this guard, the next checkpoint would overwrite the last good one). `PoisonGuard` keeps an
in-memory copy of the trainer's whole state (weights, optimiser moments, RNG) every few
steps, checked finite when taken; a non-finite loss restores it and lowers the learning
rate (for trainers that declare `Capabilities.scale_lr`). Memory: one copy of `state_tensors()`.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import torch

from peer.local.checkpoint import non_finite
from peer.trainer import StepStats, Trainer

log = logging.getLogger(__name__)


class PoisonGuard:
    """Call `check(stats)` after every step; it returns True when it rolled back."""

    def __init__(self, trainer: Trainer, every_steps: int, lr_factor: float,
                 emit: Callable[[str], None], count: Callable[[str], None] = lambda name: None) -> None:
        self.trainer, self.every, self.lr_factor, self.emit, self.count = trainer, every_steps, lr_factor, emit, count
        self._good: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None
        self._good_at: float = -math.inf  # the first copy is taken after the first finite step, when
        self.rollbacks = 0                # the optimiser has state to copy (fresh moments restore nothing)

    def check(self, stats: StepStats) -> bool:
        if not self.every:
            return False
        if not math.isfinite(stats.loss):
            return self._roll_back(f"loss {stats.loss} at step {stats.step}")
        if self.trainer.step_count - self._good_at >= self.every:
            return not self._keep()
        return False

    def _keep(self) -> bool:
        """Copy the current state if it is finite; otherwise roll back. True when kept."""
        tensors, meta = self.trainer.state_tensors()
        bad = non_finite(tensors)
        if bad:
            self._roll_back(f"non-finite values in {bad[:3]} at step {self.trainer.step_count}")
            return False
        self._good = ({k: v.detach().clone() for k, v in tensors.items()}, dict(meta))
        self._good_at = self.trainer.step_count
        return True

    def _roll_back(self, why: str) -> bool:
        if self._good is None:
            self.emit(f"training state is poisoned ({why}) and no good state was kept; going on")
            return False
        tensors, meta = self._good
        self.trainer.load_state_tensors({k: v.clone() for k, v in tensors.items()}, dict(meta))
        if self.trainer.capabilities.scale_lr:
            self.trainer.scale_lr(self.lr_factor)
        self.rollbacks += 1
        self.count("rollbacks_total")
        self.emit(f"rolled back to step {self._good_at} ({why}); learning rate x{self.lr_factor:g}")
        return True
