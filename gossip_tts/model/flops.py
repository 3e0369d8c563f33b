"""Matmul FLOPs of one EchoDiT sample, for throughput and MFU reports.

Counts 2·m·n·k per matmul (a multiply-add is two FLOPs), attention scores and the weighted sum
of values included; norms, activations, RoPE and softmax are left out (they are a few percent
and not what a GPU's peak number measures). Lengths are the padded lengths the model is run at.
"""

from __future__ import annotations

from gossip_tts.model.config import ModelConfig
from gossip_tts.model.encoders import patch_count


def _encoder_layer_flops(n: int, width: int, hidden: int) -> float:
    """One bidirectional encoder layer over n tokens."""
    projections = 5 * 2 * n * width * width  # q, k, v, gate, out
    attention = 2 * 2 * n * n * width  # scores q·kᵀ and probabilities·v
    mlp = 3 * 2 * n * width * hidden  # SwiGLU w1, w3, w2
    return float(projections + attention + mlp)


def _dit_block_flops(cfg: ModelConfig, frames: int, text_len: int, n_patches: int) -> float:
    """One DiT block: per-block AdaLN correction, condition K/V, joint attention, MLP."""
    d, keys, r = cfg.d_model, frames + text_len + n_patches, cfg.adaln_rank
    adaln = 6 * (2 * d * r + 2 * r * d) if cfg.echo else 2 * d * r + 2 * r * 6 * d  # Echo: 2 AdaLNs × 3 pairs
    cond_kv = 2 * 2 * text_len * cfg.text_dim * d + 2 * 2 * n_patches * cfg.speaker_dim * d
    projections = 5 * 2 * frames * d * d  # q, k, v, gate, out
    attention = 2 * 2 * frames * keys * d
    mlp = 3 * 2 * frames * d * cfg.mlp_hidden
    return float(adaln + cond_kv + projections + attention + mlp)


def forward_flops(cfg: ModelConfig, frames: int, text_len: int, ref_len: int) -> float:
    """Matmul FLOPs of one forward pass of one sample (frames latent frames, text_len bytes,
    ref_len reference frames)."""
    if min(frames, text_len, ref_len) < 0:
        raise ValueError(f"lengths must be >= 0, got {frames}, {text_len}, {ref_len}")
    d, n_patches = cfg.d_model, patch_count(ref_len, cfg.speaker_patch)
    text = cfg.text_layers * _encoder_layer_flops(text_len, cfg.text_dim, cfg.text_mlp_hidden)
    speaker = 2 * n_patches * cfg.speaker_patch * cfg.latent_dim * cfg.speaker_dim + cfg.speaker_layers * (
        _encoder_layer_flops(n_patches, cfg.speaker_dim, cfg.speaker_mlp_hidden)
    )
    timestep = 2 * cfg.t_freq_dim * d + 2 * d * d + 2 * d * (3 if cfg.echo else 6) * d  # t MLP + shared AdaLN
    io = 2 * frames * cfg.latent_dim * d * 2  # in_proj and out_proj
    blocks = cfg.n_layers * _dit_block_flops(cfg, frames, text_len, n_patches)
    return float(text + speaker + timestep + io + blocks)


def train_flops_per_sample(cfg: ModelConfig, frames: int, text_len: int, ref_len: int) -> float:
    """Forward + backward ≈ 3 × forward (the backward computes grads of activations and weights)."""
    return 3.0 * forward_flops(cfg, frames, text_len, ref_len)
