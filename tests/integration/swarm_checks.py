"""Measurements shared by the multi-process gossip tests: eval loss and parameter distances."""

from __future__ import annotations

from pathlib import Path

import torch

from gossip_tts.apps.eval_app import EvalConfig, evaluate
from gossip_tts.train.trainer import MODEL_PREFIX
from peer.local.checkpoint import load_checkpoint


def eval_loss(ckpt: Path, val: Path) -> float:
    return evaluate(EvalConfig(checkpoint=ckpt, sources=[str(val)], device="cpu"))


def flat_params(ckpt: Path) -> torch.Tensor:
    tensors, _ = load_checkpoint(ckpt)
    names = sorted(k for k in tensors if k.startswith(MODEL_PREFIX))
    return torch.cat([tensors[k].reshape(-1).float() for k in names])


def mean_pairwise_distance(vectors: list[torch.Tensor]) -> float:
    dists = [float((a - b).norm()) for i, a in enumerate(vectors) for b in vectors[i + 1 :]]
    return sum(dists) / len(dists)
