"""`gossip-tts peer`: build a TTS replica and train it (alone, or with gossip once enabled)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from gossip_tts.model import count_parameters
from gossip_tts.train.config import TrainConfig
from gossip_tts.train.trainer import TTSTrainer
from peer.loop import LoopConfig, LoopResult, run_loop


@dataclass
class PeerAppConfig:
    train: TrainConfig = field(default_factory=TrainConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    cache_dir: Path | None = None
    """Where the built-in corpus is generated when no --data is given."""


def default_sources(cache_dir: Path | None, emit=print) -> list[str]:
    """The built-in corpus (made on first use) as the data source."""
    from gossip_tts.data import ensure_builtin_corpus

    train_dir, _val_dir = ensure_builtin_corpus(cache_dir)
    emit(f"no --data given: training on the built-in corpus at {train_dir}")
    return [str(train_dir)]


def run(cfg: PeerAppConfig, stop: threading.Event | None = None, emit=print) -> LoopResult:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not cfg.train.sources:
        cfg.train.sources = default_sources(cfg.cache_dir, emit)
    trainer = TTSTrainer(cfg.train)
    try:
        emit(
            f"model {cfg.train.preset} ({count_parameters(trainer.model) / 1e6:.2f}M params) on {trainer.device}, "
            f"codec {trainer.info.codec} dim {trainer.info.latent_dim} @ {trainer.info.frame_rate:.2f} Hz"
        )
        result = run_loop(trainer, cfg.loop, stop=stop, emit=emit)
    finally:
        trainer.close()
    emit(
        f"stopped at step {result.steps}"
        + (f", loss {result.last_loss:.4f}" if result.last_loss is not None else "")
        + (f", checkpoint in {cfg.loop.checkpoint_dir}" if cfg.loop.checkpoint_dir else "")
    )
    return result
