"""Registers the tiny TTS model with simnet, so `gossip-tts simnet` can simulate a TTS swarm.

simnet never imports gossip_tts; the CLI imports this module, which adds "tts-tiny" to
simnet's model registry. Every peer trains `TTSTrainer` (preset tiny) on the built-in
synthetic-speech corpus from the same initial weights (the init seed is the simulation
seed), each with its own data order (`TrainConfig.seed` = peer index + n_peers·seed).
The evaluator scores any parameter vector with `eval_loss` (deterministic flow-matching
loss over a grid of t, fixed noise, no condition dropout) on a fixed validation batch.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from gossip_tts.data import ensure_builtin_corpus
from gossip_tts.model.flow import eval_loss
from gossip_tts.train.config import TrainConfig
from gossip_tts.train.trainer import TTSTrainer
from simnet.world.models import register_model


def _config(split_dir: str, seed: int, batch_size: int, **kw: Any) -> TrainConfig:
    kw.setdefault("warmup_steps", 20)
    kw.setdefault("bucket_size", 4 * batch_size)
    return TrainConfig(preset="tiny", device="cpu", sources=[split_dir], batch_size=batch_size, seed=seed, **kw)


def tts_tiny_factory(peer_index: int, n_peers: int, seed: int, batch_size: int = 4, **kw: Any) -> TTSTrainer:
    train_dir, _ = ensure_builtin_corpus()
    cfg = _config(str(train_dir), peer_index + n_peers * seed, batch_size, **kw)
    return TTSTrainer(cfg, init_seed=seed)


def tts_tiny_evaluator(n_peers: int, seed: int, batch_size: int = 4, **kw: Any) -> Callable[[torch.Tensor], float]:
    _, val_dir = ensure_builtin_corpus()
    scorer = TTSTrainer(_config(str(val_dir), 0, max(8, batch_size), **kw), init_seed=seed)
    batch = scorer._next_batch()

    def evaluate(flat: torch.Tensor) -> float:
        scorer.set_flat_params(flat)
        scorer.model.eval()
        with torch.no_grad():
            return eval_loss(scorer.model, [batch], seed=0)

    return evaluate


register_model("tts-tiny", tts_tiny_factory, tts_tiny_evaluator)
