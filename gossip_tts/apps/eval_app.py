"""`gossip-tts eval`: the deterministic flow-matching loss of a checkpoint on some tars."""

from __future__ import annotations

import numpy as np
import torch

from gossip_tts.data import CollateConfig, LatentStream, StreamConfig, collate
from gossip_tts.data.collate import skip_reason
from gossip_tts.data.sample import CodecInfo
from gossip_tts.device import resolve_device
from gossip_tts.apps.eval_config import EvalConfig
from gossip_tts.model import eval_loss
from gossip_tts.train.load import load_model


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
