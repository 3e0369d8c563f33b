"""Text encoder over UTF-8 bytes and speaker encoder over patches of a reference latent.

Both are small bidirectional pre-norm transformers that honour key padding; their outputs are
zero on padded positions, which the DiT masks out as keys anyway.
"""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from gossip_tts.model.attention import SelfAttention
from gossip_tts.model.layers import RMSNorm, SwiGLU, key_mask_for_attention, rope_tables


class EncoderBlock(nn.Module):
    """Pre-norm transformer layer: x += Attn(norm(x)); x += MLP(norm(x))."""

    def __init__(self, dim: int, n_heads: int, hidden: int, eps: float, echo: bool = False, causal: bool = False) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(dim, eps)
        self.attn = SelfAttention(dim, n_heads, eps, per_head_norm=echo, causal=causal)
        self.mlp_norm = RMSNorm(dim, eps)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], attn_mask: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x), rope, attn_mask)
        return x + self.mlp(self.mlp_norm(x))  # (B, T, dim)


class Encoder(nn.Module):
    """A stack of EncoderBlocks with a final norm; padded positions come out as zeros."""

    def __init__(
        self, dim: int, n_layers: int, n_heads: int, hidden: int, eps: float, rope_theta: float,
        echo: bool = False, causal: bool = False,
    ) -> None:
        super().__init__()
        self.head_dim = dim // n_heads
        self.rope_theta = rope_theta
        self.blocks = nn.ModuleList(EncoderBlock(dim, n_heads, hidden, eps, echo, causal) for _ in range(n_layers))
        self.out_norm = RMSNorm(dim, eps)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        # x: (B, T, dim); mask: (B, T) bool, True=real
        rope = rope_tables(x.shape[1], self.head_dim, self.rope_theta, x.device)
        attn_mask = key_mask_for_attention(mask)  # (B, 1, 1, T)
        for block in self.blocks:
            x = block(x, rope, attn_mask)
        return self.out_norm(x) * mask[..., None].to(x.dtype)  # (B, T, dim)


class TextEncoder(nn.Module):
    """Byte embedding (vocab 256) + bidirectional transformer: no tokenizer to ship or agree on."""

    def __init__(
        self, dim: int, n_layers: int, n_heads: int, hidden: int, eps: float, rope_theta: float, echo: bool = False
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, dim)
        self.encoder = Encoder(dim, n_layers, n_heads, hidden, eps, rope_theta, echo)

    def forward(self, text_ids: Tensor, text_mask: Tensor) -> Tensor:
        # text_ids: (B, L) int64 in [0, 256); text_mask: (B, L) bool -> (B, L, dim)
        return self.encoder(self.embed(text_ids), text_mask)


class SpeakerEncoder(nn.Module):
    """Folds `patch` reference frames into one token, then a bidirectional transformer.

    Patching cuts the speaker sequence (and the DiT's cross-attention to it) by `patch`×. A patch
    is real if any of its frames is; padded frames are zeroed first so a partly padded patch does
    not depend on what the padding held. `echo` is Echo's variant: a biased in_proj scaled by
    1/6 (its tamer start) and a causal encoder.
    """

    def __init__(
        self, latent_dim: int, patch: int, dim: int, n_layers: int, n_heads: int, hidden: int,
        eps: float, rope_theta: float, echo: bool = False,
    ) -> None:
        super().__init__()
        self.patch = patch
        self.in_scale = 1 / 6 if echo else 1.0
        self.in_proj = nn.Linear(patch * latent_dim, dim, bias=echo)
        self.encoder = Encoder(dim, n_layers, n_heads, hidden, eps, rope_theta, echo, causal=echo)

    def forward(self, ref: Tensor, ref_mask: Tensor) -> tuple[Tensor, Tensor]:
        # ref: (B, R, D); ref_mask: (B, R) bool -> tokens (B, P, dim), patch mask (B, P), P = ceil(R/patch)
        b, r, d = ref.shape
        pad = (-r) % self.patch
        ref = F.pad(ref * ref_mask[..., None].to(ref.dtype), (0, 0, 0, pad))  # (B, P*patch, D)
        mask = F.pad(ref_mask, (0, pad)).view(b, -1, self.patch).any(dim=-1)  # (B, P)
        x = self.in_proj(ref.reshape(b, -1, self.patch * d)) * self.in_scale  # (B, P, dim)
        return self.encoder(x, mask), mask


def patch_count(ref_len: int, patch: int) -> int:
    """Speaker tokens made from `ref_len` reference frames."""
    return -(-ref_len // patch)

