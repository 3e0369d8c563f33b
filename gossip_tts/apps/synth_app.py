"""`gossip-tts synthesize`: text (+ a reference clip) -> latents by the Euler sampler -> wav."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from gossip_tts.audio import load_codec
from gossip_tts.audio.io import read_wav, write_wav
from gossip_tts.data.text import encode_text
from gossip_tts.device import resolve_device
from gossip_tts.model import sample
from gossip_tts.apps.synth_config import SynthConfig
from gossip_tts.apps.text_coverage import unseen_warning
from gossip_tts.train.load import load_model


def estimate_frames(text: str, meta: dict, frame_rate: float) -> int:
    """Frames for `text` at the pace (frames per text byte) seen in training, else ~14 bytes/s."""
    per_byte = meta.get("frames_per_text_byte") or frame_rate / 14.0
    return max(8, int(round(len(text.encode("utf-8")) * per_byte)))


def check_length(n_frames: int, limit: int, frame_rate: float) -> None:
    """Refuse output longer than the longest clip the model was trained on (its RoPE positions
    past that were never trained, so it would not speak them, only babble)."""
    if n_frames > limit:
        raise ValueError(
            f"the output would be {n_frames} frames ({n_frames / frame_rate:.1f} s) but this model was trained on "
            f"clips of at most {limit} frames ({limit / frame_rate:.1f} s); shorten the text or pass a smaller --seconds"
        )


def _to_stderr(line: str) -> None:
    print(f"WARNING {line}", file=sys.stderr, flush=True)


def run(cfg: SynthConfig, emit=print, warn: Callable[[str], None] = _to_stderr) -> Path:
    """Speak `cfg.text` into `cfg.out`; progress through `emit`, what the user should know through `warn`."""
    device = resolve_device(cfg.device)
    model, meta = load_model(cfg.checkpoint, device, cfg.weights)
    emit(f"{'averaged' if meta['weights'] == 'average' else 'live'} weights of {cfg.checkpoint} at step {meta.get('step')}")
    codec_meta = meta["codec"]
    codec = load_codec(codec_meta["codec"], weights=cfg.codec_weights)
    if codec.latent_dim != codec_meta["latent_dim"]:
        raise ValueError(f"codec {codec.name} gives dim {codec.latent_dim}, checkpoint wants {codec_meta['latent_dim']}")
    mc = model.cfg
    unseen = unseen_warning(cfg.text, meta.get("text_bytes"))
    if unseen:
        warn(unseen)
    ids = encode_text(cfg.text, mc.text_frontend)
    if len(ids) > mc.max_text_bytes:
        raise ValueError(f"--text is {len(ids)} bytes; this model was trained on texts of at most {mc.max_text_bytes}: split it")
    text_ids = torch.tensor([ids], dtype=torch.long, device=device)
    text_mask = torch.ones_like(text_ids, dtype=torch.bool)
    if cfg.reference is not None:
        wav, sr = read_wav(cfg.reference)
        ref_cap = (meta.get("train_config") or {}).get("max_ref_frames", mc.max_frames)
        ref_np = codec.encode(wav, sr)[: min(ref_cap, mc.max_frames)]
        ref = torch.from_numpy(np.ascontiguousarray(ref_np, dtype=np.float32))[None].to(device)
        ref_mask = torch.ones(ref.shape[:2], dtype=torch.bool, device=device)
    else:
        ref = torch.zeros(1, 4, codec.latent_dim, device=device)
        ref_mask = torch.zeros(1, 4, dtype=torch.bool, device=device)
    n_frames = (
        int(round(cfg.seconds * codec.frame_rate)) if cfg.seconds else estimate_frames(cfg.text, meta, codec.frame_rate)
    )
    check_length(n_frames, mc.max_frames, codec.frame_rate)
    gen = torch.Generator().manual_seed(cfg.seed)
    with torch.no_grad():
        latents = sample(model, text_ids, text_mask, ref, ref_mask, n_frames, guidance=cfg.sampler, generator=gen)
    wav_out = codec.decode(latents[0].float().cpu().numpy())
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    write_wav(cfg.out, wav_out, codec.sample_rate)
    emit(f"wrote {cfg.out} ({len(wav_out) / codec.sample_rate:.2f} s, {n_frames} frames, {cfg.steps} steps)")
    return cfg.out
