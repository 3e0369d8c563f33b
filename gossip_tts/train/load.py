"""Rebuilding a model from a checkpoint, for eval and synthesis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gossip_tts.model import EchoDiT, ModelConfig
from gossip_tts.train.trainer import MODEL_PREFIX
from gossip_tts.train.weights import check_weights
from peer.local.checkpoint import AVERAGE_PREFIX, CheckpointError, load_checkpoint


def load_model(path: str | Path, device: torch.device, weights: str = "average") -> tuple[EchoDiT, dict[str, Any]]:
    """The checkpoint's model in eval mode, with the checkpoint's metadata (`meta["weights"]` says
    which weights were loaded)."""
    check_weights(weights)
    tensors, meta = load_checkpoint(path)
    if "model_config" not in meta:
        raise CheckpointError(f"{path} holds no model config; was it written by a TTS peer?")
    model = EchoDiT(ModelConfig(**meta["model_config"]))
    weights_of = {k[len(MODEL_PREFIX) :]: v for k, v in tensors.items() if k.startswith(MODEL_PREFIX)}
    averaged = {k[len(AVERAGE_PREFIX) :]: v for k, v in tensors.items() if k.startswith(AVERAGE_PREFIX)}
    if weights == "average" and averaged:
        if not set(averaged) <= set(weights_of):
            raise CheckpointError(f"{path}: averaged weights {sorted(set(averaged) - set(weights_of))[:3]} are not model parameters")
        weights_of.update(averaged)  # parameters that are not gossiped keep their live values
    meta = {**meta, "weights": "average" if weights == "average" and averaged else "live"}
    missing, unexpected = model.load_state_dict(weights_of, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{path} does not match its model config: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.to(device).eval(), meta
