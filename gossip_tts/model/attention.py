"""Attention: encoder self-attention, and the DiT's joint attention over self ∪ text ∪ speaker.

Both normalise q and k per head (QK-norm keeps logits bounded without a warm-up) and gate
their output with a sigmoid of the input, which lets a head switch itself off instead of
dumping attention mass on some token.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from gossip_tts.model.layers import apply_rope, qk_norm


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, H*hd) -> (B, H, T, hd)."""
    b, t, _ = x.shape
    return x.view(b, t, n_heads, x.shape[-1] // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, hd) -> (B, T, H*hd)."""
    b, h, t, hd = x.shape
    return x.transpose(1, 2).reshape(b, t, h * hd)


class SelfAttention(nn.Module):
    """Key-padded self-attention of the text and speaker encoders (RoPE on all heads).

    `causal` (Echo's speaker encoder) lets a position see only the ones before it; with right
    padding that already keeps padding out of every real position, so no key mask is used.
    """

    def __init__(self, dim: int, n_heads: int, eps: float, per_head_norm: bool = False, causal: bool = False) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.causal = causal
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.q_norm = qk_norm(n_heads, dim // n_heads, eps, per_head_norm)
        self.k_norm = qk_norm(n_heads, dim // n_heads, eps, per_head_norm)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], attn_mask: Tensor) -> Tensor:
        # x: (B, T, dim); rope: cos, sin (T, hd/2); attn_mask: (B, 1, 1, T) bool, True=attend
        q = apply_rope(self.q_norm(split_heads(self.wq(x), self.n_heads)), *rope)  # (B, H, T, hd)
        k = apply_rope(self.k_norm(split_heads(self.wk(x), self.n_heads)), *rope)  # (B, H, T, hd)
        v = split_heads(self.wv(x), self.n_heads)  # (B, H, T, hd)
        if self.causal:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.wo(merge_heads(y) * torch.sigmoid(self.gate(x)))  # (B, T, dim)


class JointAttention(nn.Module):
    """Latent queries attend to keys/values of self ∪ text ∪ speaker in one softmax.

    Text and speaker tokens get their own K/V projections (they live in other spaces) and no
    RoPE: only self keys carry positions, and only on the first half of the heads, leaving the
    other half free to attend by content alone. The condition K/V do not depend on the noisy
    latent or on t, so `condition_kv` is split out for the sampler to compute once.
    """

    def __init__(
        self, dim: int, n_heads: int, text_dim: int, speaker_dim: int, eps: float, per_head_norm: bool = False
    ) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_rope_heads = n_heads // 2
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wk_text = nn.Linear(text_dim, dim, bias=False)
        self.wv_text = nn.Linear(text_dim, dim, bias=False)
        self.wk_speaker = nn.Linear(speaker_dim, dim, bias=False)
        self.wv_speaker = nn.Linear(speaker_dim, dim, bias=False)
        self.gate = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.q_norm = qk_norm(n_heads, dim // n_heads, eps, per_head_norm)
        self.k_norm = qk_norm(n_heads, dim // n_heads, eps, per_head_norm)

    def condition_kv(self, text: Tensor, speaker: Tensor) -> tuple[Tensor, Tensor]:
        """K and V (B, H, L+P, hd) of the text (B, L, text_dim) and speaker (B, P, speaker_dim) tokens."""
        k = torch.cat([self.wk_text(text), self.wk_speaker(speaker)], dim=1)  # (B, L+P, dim)
        v = torch.cat([self.wv_text(text), self.wv_speaker(speaker)], dim=1)  # (B, L+P, dim)
        return self.k_norm(split_heads(k, self.n_heads)), split_heads(v, self.n_heads)

    def _rope_half(self, x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
        # x: (B, H, T, hd); rotate heads [0, H/2), leave the rest untouched
        r = self.n_rope_heads
        return torch.cat([apply_rope(x[:, :r], *rope), x[:, r:]], dim=1)

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor],
        attn_mask: Tensor,
        cond_kv: tuple[Tensor, Tensor],
    ) -> Tensor:
        # x: (B, T, dim); rope: cos, sin (T, hd/2); attn_mask: (B, 1, 1, T+L+P) bool, True=attend
        # cond_kv: K, V (B, H, L+P, hd) from condition_kv
        q = self._rope_half(self.q_norm(split_heads(self.wq(x), self.n_heads)), rope)  # (B, H, T, hd)
        k = self._rope_half(self.k_norm(split_heads(self.wk(x), self.n_heads)), rope)  # (B, H, T, hd)
        v = split_heads(self.wv(x), self.n_heads)  # (B, H, T, hd)
        k = torch.cat([k, cond_kv[0].to(k.dtype)], dim=2)  # (B, H, T+L+P, hd)
        v = torch.cat([v, cond_kv[1].to(v.dtype)], dim=2)  # (B, H, T+L+P, hd)
        y = merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask))  # (B, T, dim)
        return self.wo(y * torch.sigmoid(self.gate(x)))
