"""A fixed probe batch: how a peer checks a state before it adopts it.

A joining peer is offered states by strangers; a claimed step proves nothing (a liar can
claim step 10^9 with weights of 1e30). Before adopting, the peer scores the offered
parameters and its own on the same held-out batch with the deterministic flow-matching
loss, and adopts only a state that scores better. The trainer keeps its probe batch and
hands these functions the model, the batch and its parameter access: nothing else of it.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from gossip_tts.data.batch import Batch
from gossip_tts.model import eval_loss


class FlatParams(Protocol):
    """Reading and writing a model's parameters as one flat vector (as the Trainer seam does)."""

    def get_flat_params(self) -> torch.Tensor: ...

    def set_flat_params(self, flat: torch.Tensor) -> None: ...


def probe_loss(model: torch.nn.Module, batch: Batch, params: FlatParams, flat: torch.Tensor | None = None) -> float:
    """The model's loss on `batch`, with `flat` as its parameters when given (ours restored)."""
    saved = None
    if flat is not None:
        saved = params.get_flat_params()
        params.set_flat_params(flat)
    try:
        model.eval()
        return eval_loss(model, [batch], grid=(0.3, 0.7))
    finally:
        if saved is not None:
            params.set_flat_params(saved)


def probe_better(model: torch.nn.Module, batch: Batch, params: FlatParams, flat: torch.Tensor) -> bool:
    """Whether `flat` scores strictly better than our own parameters (a non-finite score never does)."""
    theirs = probe_loss(model, batch, params, flat)
    return math.isfinite(theirs) and theirs < probe_loss(model, batch, params)
