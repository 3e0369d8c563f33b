"""Rebuilding a model from a checkpoint, for eval and synthesis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gossip_tts.model import EchoDiT, ModelConfig
from gossip_tts.train.trainer import MODEL_PREFIX
from peer.checkpoint import CheckpointError, load_checkpoint


def load_model(path: str | Path, device: torch.device) -> tuple[EchoDiT, dict[str, Any]]:
    """The checkpoint's model in eval mode, with the checkpoint's metadata."""
    tensors, meta = load_checkpoint(path)
    if "model_config" not in meta:
        raise CheckpointError(f"{path} holds no model config; was it written by a TTS peer?")
    model = EchoDiT(ModelConfig(**meta["model_config"]))
    weights = {k[len(MODEL_PREFIX) :]: v for k, v in tensors.items() if k.startswith(MODEL_PREFIX)}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{path} does not match its model config: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model.to(device).eval(), meta
