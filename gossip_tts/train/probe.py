"""A fixed probe batch: how a peer checks a state before it adopts it.

A joining peer is offered states by strangers; a claimed step proves nothing (a liar can
claim step 10^9 with weights of 1e30). Before adopting, the peer scores the offered
parameters and its own on the same held-out batch with the deterministic flow-matching
loss, and adopts only a state that scores better.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from gossip_tts.model import eval_loss

if TYPE_CHECKING:
    from gossip_tts.train.trainer import TTSTrainer


def probe_loss(trainer: "TTSTrainer", flat: torch.Tensor | None = None) -> float:
    """The trainer's loss on its probe batch, with `flat` as parameters when given (ours restored)."""
    if trainer.probe_batch is None:
        trainer.probe_batch = trainer.next_batch()  # the first batch drawn, kept aside
    saved = None
    if flat is not None:
        saved = trainer.get_flat_params()
        trainer.set_flat_params(flat)
    try:
        trainer.model.eval()
        return eval_loss(trainer.model, [trainer.probe_batch], grid=(0.3, 0.7))
    finally:
        if saved is not None:
            trainer.set_flat_params(saved)


def probe_better(trainer: "TTSTrainer", flat: torch.Tensor) -> bool:
    """Whether `flat` scores strictly better than our own parameters (a non-finite score never does)."""
    theirs = probe_loss(trainer, flat)
    return math.isfinite(theirs) and theirs < probe_loss(trainer)
