"""EchoDiT: a diffusion transformer over audio latents, conditioned on text bytes and a
speaker reference, predicting the rectified-flow velocity ε − x0."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from gossip_tts.model.attention import JointAttention
from gossip_tts.model.config import ModelConfig
from gossip_tts.model.encoders import SpeakerEncoder, TextEncoder
from gossip_tts.model.layers import (
    EchoAdaLN,
    LowRankAdaLN,
    RMSNorm,
    SwiGLU,
    key_mask_for_attention,
    modulate,
    rope_tables,
    timestep_features,
)


@dataclass
class Conditions:
    """Everything the trunk needs from text and speaker; independent of x_t and t, so the
    sampler computes it once per utterance instead of once per step."""

    kv: list[tuple[Tensor, Tensor]]  # per block: K, V (B, H, L+P, hd)
    mask: Tensor  # (B, L+P) bool, True=real text byte / speaker patch


class DiTBlock(nn.Module):
    """x += tanh(g1)·Attn(AdaLN(x)); x += tanh(g2)·MLP(AdaLN(x)).

    The tanh bounds each gate so a large timestep embedding cannot blow up the residual stream.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.attn_norm = RMSNorm(d, cfg.norm_eps, affine=False)
        self.attn = JointAttention(d, cfg.n_heads, cfg.text_dim, cfg.speaker_dim, cfg.norm_eps)
        self.mlp_norm = RMSNorm(d, cfg.norm_eps, affine=False)
        self.mlp = SwiGLU(d, cfg.mlp_hidden)
        self.adaln = LowRankAdaLN(d, cfg.adaln_rank)

    def forward(
        self,
        x: Tensor,
        shared_mod: Tensor,
        c: Tensor,
        rope: tuple[Tensor, Tensor],
        attn_mask: Tensor,
        cond_kv: tuple[Tensor, Tensor],
    ) -> Tensor:
        # x: (B, T, d); shared_mod: (B, 6d); c: (B, d) activated timestep embedding
        mod = (shared_mod + self.adaln(c))[:, None, :]  # (B, 1, 6d)
        shift1, scale1, gate1, shift2, scale2, gate2 = mod.chunk(6, dim=-1)  # (B, 1, d) each
        h = modulate(self.attn_norm(x), shift1, scale1)
        x = x + torch.tanh(gate1) * self.attn(h, rope, attn_mask, cond_kv)
        x = x + torch.tanh(gate2) * self.mlp(modulate(self.mlp_norm(x), shift2, scale2))
        return x  # (B, T, d)


class EchoDiTBlock(nn.Module):
    """Echo's block: the same residual form, with an EchoAdaLN (normalise, modulate, gate) per
    sub-layer reading the shared (B, 3d) modulation, and per-head QK-norm weights."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.attn = JointAttention(d, cfg.n_heads, cfg.text_dim, cfg.speaker_dim, cfg.norm_eps, per_head_norm=True)
        self.mlp = SwiGLU(d, cfg.mlp_hidden)
        self.attn_adaln = EchoAdaLN(d, cfg.adaln_rank, cfg.norm_eps)
        self.mlp_adaln = EchoAdaLN(d, cfg.adaln_rank, cfg.norm_eps)

    def forward(
        self,
        x: Tensor,
        shared_mod: Tensor,
        c: Tensor,
        rope: tuple[Tensor, Tensor],
        attn_mask: Tensor,
        cond_kv: tuple[Tensor, Tensor],
    ) -> Tensor:
        # x: (B, T, d); shared_mod: (B, 3d); c is unused (Echo's blocks read only the shared modulation)
        mod = shared_mod[:, None, :]  # (B, 1, 3d)
        h, gate = self.attn_adaln(x, mod)
        x = x + gate * self.attn(h, rope, attn_mask, cond_kv)
        h, gate = self.mlp_adaln(x, mod)
        return x + gate * self.mlp(h)  # (B, T, d)


class EchoDiT(nn.Module):
    """Text- and speaker-conditioned DiT predicting the velocity v = ε − x0 of x_t = (1−t)x0 + tε.

    Masks are honoured everywhere (self keys by x_mask, text by text_mask, speaker patches by
    ref_mask), so padding never changes the output on real frames, and an all-False text_mask or
    ref_mask is the "no condition" input of classifier-free guidance.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        echo = cfg.echo
        self.text_encoder = TextEncoder(
            cfg.text_dim, cfg.text_layers, cfg.text_heads, cfg.text_mlp_hidden, cfg.norm_eps, cfg.rope_theta, echo
        )
        self.speaker_encoder = SpeakerEncoder(
            cfg.latent_dim, cfg.speaker_patch, cfg.speaker_dim, cfg.speaker_layers, cfg.speaker_heads,
            cfg.speaker_mlp_hidden, cfg.norm_eps, cfg.rope_theta, echo,
        )
        self.in_proj = nn.Linear(cfg.latent_dim, d, bias=echo)
        self.t_mlp = nn.Sequential(
            nn.Linear(cfg.t_freq_dim, d, bias=False), nn.SiLU(), nn.Linear(d, d, bias=False)
        )
        # One full-rank modulation for all blocks: (shift, scale, gate) × 2 sub-layers, or Echo's one triple.
        self.shared_adaln = nn.Linear(d, (3 if echo else 6) * d, bias=False)
        block = EchoDiTBlock if echo else DiTBlock
        self.blocks = nn.ModuleList(block(cfg) for _ in range(cfg.n_layers))
        self.out_norm = RMSNorm(d, cfg.norm_eps)
        self.out_proj = nn.Linear(d, cfg.latent_dim, bias=echo)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """N(0, 0.02) weights, zero biases; AdaLN projections and the output projection start at
        zero, so each block starts as the identity (tanh(0) gates) and the first prediction is 0."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif hasattr(module, "weight") and isinstance(module.weight, nn.Parameter):
                nn.init.ones_(module.weight)  # RMSNorm / HeadRMSNorm
        nn.init.zeros_(self.shared_adaln.weight)
        for name, p in self.blocks.named_parameters():
            if "adaln" in name and ("up" in name.rsplit(".", 2)[-2]):
                nn.init.zeros_(p)
        nn.init.zeros_(self.out_proj.weight)

    def shard_units(self) -> list[tuple[nn.Module, tuple[str, ...]]]:
        """What a sharded group (FSDP2) gathers one unit at a time, inner units before the blocks
        holding them, each with the methods besides `forward` that run it: every DiT block, its
        attention first (`encode_conditions` calls each one's `condition_kv` before any block
        runs), then every block of the text and speaker encoders. The model itself is the last
        unit, which the caller wraps."""
        units: list[tuple[nn.Module, tuple[str, ...]]] = []
        for block in self.blocks:
            units += [(block.attn, ("condition_kv",)), (block, ())]
        for encoder in (self.text_encoder.encoder, self.speaker_encoder.encoder):
            units += [(block, ()) for block in encoder.blocks]
        return units

    def encode_conditions(
        self, text_ids: Tensor, text_mask: Tensor, ref: Tensor, ref_mask: Tensor
    ) -> Conditions:
        """Encode text (B, L) and speaker reference (B, R, D) into per-block K/V and a key mask."""
        cfg = self.cfg
        if text_ids.shape[1] > cfg.max_text_bytes:
            raise ValueError(f"text has {text_ids.shape[1]} bytes; the model accepts {cfg.max_text_bytes}")
        if ref.shape[1] > cfg.ref_limit:
            raise ValueError(f"speaker reference has {ref.shape[1]} frames; the model accepts {cfg.ref_limit}")
        if ref.shape[-1] != cfg.latent_dim:
            raise ValueError(f"reference has {ref.shape[-1]} channels; the model expects {cfg.latent_dim}")
        text = self.text_encoder(text_ids, text_mask)  # (B, L, text_dim)
        # Cast like x_t in denoise: bf16 weights without autocast would refuse a float32 reference.
        speaker, speaker_mask = self.speaker_encoder(ref.to(self.in_proj.weight.dtype), ref_mask)  # (B, P, speaker_dim), (B, P)
        kv = [block.attn.condition_kv(text, speaker) for block in self.blocks]
        return Conditions(kv=kv, mask=torch.cat([text_mask, speaker_mask], dim=1))

    def denoise(self, x_t: Tensor, t: Tensor, cond: Conditions, x_mask: Tensor | None = None) -> Tensor:
        """Velocity (B, T, D) of noisy latents x_t (B, T, D) at times t (B,), given encoded conditions."""
        cfg = self.cfg
        b, n_frames, latent_dim = x_t.shape
        if latent_dim != cfg.latent_dim:
            raise ValueError(f"latent has {latent_dim} channels; the model expects {cfg.latent_dim}")
        if n_frames > cfg.max_frames:
            raise ValueError(f"latent has {n_frames} frames; the model accepts {cfg.max_frames}")
        if t.shape != (b,):
            raise ValueError(f"t must have shape ({b},), got {tuple(t.shape)}")
        if x_mask is None:
            x_mask = torch.ones(b, n_frames, dtype=torch.bool, device=x_t.device)

        weight_dtype = self.in_proj.weight.dtype
        c = F.silu(self.t_mlp(timestep_features(t, cfg.t_freq_dim).to(weight_dtype)))  # (B, d)
        shared_mod = self.shared_adaln(c)  # (B, 6d), Echo: (B, 3d)
        rope = rope_tables(n_frames, cfg.head_dim, cfg.rope_theta, x_t.device)  # (T, hd/2) x2
        attn_mask = key_mask_for_attention(torch.cat([x_mask, cond.mask], dim=1))  # (B, 1, 1, T+L+P)

        h = self.in_proj(x_t.to(weight_dtype))  # (B, T, d)
        for block, kv in zip(self.blocks, cond.kv):
            h = block(h, shared_mod, c, rope, attn_mask, kv)
        v = self.out_proj(self.out_norm(h))  # (B, T, D)
        return v * x_mask[..., None].to(v.dtype)  # padded frames predict 0

    def forward(
        self,
        x_t: Tensor,
        t: Tensor,
        text_ids: Tensor,
        text_mask: Tensor,
        ref: Tensor,
        ref_mask: Tensor,
        x_mask: Tensor | None = None,
    ) -> Tensor:
        """Velocity (B, T, D) of x_t (B, T, D) at t (B,) for text (B, L) and reference (B, R, D)."""
        return self.denoise(x_t, t, self.encode_conditions(text_ids, text_mask, ref, ref_mask), x_mask)
