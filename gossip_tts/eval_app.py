"""`gossip-tts eval`: the deterministic flow-matching loss of a checkpoint on some tars."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gossip_tts.data import CollateConfig, LatentStream, StreamConfig, collate
from gossip_tts.data.collate import skip_reason
from gossip_tts.data.sample import CodecInfo
from gossip_tts.device import resolve_device
from gossip_tts.model import eval_loss
from gossip_tts.train.load import check_weights, load_model


@dataclass
class EvalConfig:
    checkpoint: Path
    sources: list[str] = field(default_factory=list)
    device: str = "cpu"
    batch_size: int = 16
    max_samples: int = 256
    """Evaluate on at most this many clips (the first ones, in file order)."""
    weights: str = "average"
    """"average" (the peer's averaged weights, where the checkpoint has them) or "live" (gossip_tts.train.load)."""

    def __post_init__(self) -> None:
        self.checkpoint = Path(self.checkpoint)
        if not self.sources:
            raise ValueError("eval needs at least one --data source")
        if self.batch_size <= 0 or self.max_samples <= 0:
            raise ValueError("batch_size and max_samples must be > 0")
        check_weights(self.weights)


def evaluate(cfg: EvalConfig, emit=print) -> float:
    """Loss on a fixed t grid with fixed noise: the same checkpoint and data give the same number.

    Clips are whole, as in training; those over the model's limits are skipped and counted.
    """
    device = resolve_device(cfg.device)
    model, meta = load_model(cfg.checkpoint, device, cfg.weights)
    info = CodecInfo(**meta["codec"])
    mc = model.cfg
    ref_cap = (meta.get("train_config") or {}).get("max_ref_frames", mc.max_frames)
    ccfg = CollateConfig(max_frames=mc.max_frames, max_ref_frames=min(ref_cap, mc.max_frames),
                         max_text_bytes=mc.max_text_bytes, text_frontend=mc.text_frontend)
    skipped = 0
    stream = LatentStream(StreamConfig(sources=cfg.sources, info=info, seed=0, shuffle_shards=False, shuffle_buffer=1, loop=False))
    rng = np.random.default_rng(0)
    batches, chunk = [], []
    try:
        for i, sample in enumerate(stream):
            if i >= cfg.max_samples:
                break
            if skip_reason(sample, ccfg) is not None:
                skipped += 1
                continue
            chunk.append(sample)
            if len(chunk) == cfg.batch_size:
                batches.append(collate(chunk, ccfg, rng).to(device))
                chunk = []
    finally:
        stream.close()
    if chunk:
        batches.append(collate(chunk, ccfg, rng).to(device))
    if skipped:
        emit(f"skipped {skipped} clips over the model's limits ({mc.max_frames} frames, {mc.max_text_bytes} text bytes)")
    if not batches:
        raise ValueError(f"--data {', '.join(map(str, cfg.sources))}: no readable latent sample within the model's "
                         "limits (raw-audio tars? pack them first: gossip-tts pack SRC_DIR OUT_DIR)")
    with torch.no_grad():
        return float(eval_loss(model, batches))


def run(cfg: EvalConfig, emit=print) -> float:
    loss = evaluate(cfg, emit)
    emit(f"eval_loss={loss:.6f}")
    return loss
