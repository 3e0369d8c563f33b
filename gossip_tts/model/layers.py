"""Small building blocks shared by the DiT trunk and its encoders (no biases, except in the
Echo-layout AdaLN, whose up-projections carry them as Echo's weights do)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class RMSNorm(nn.Module):
    """RMS normalisation over the last dim, computed in float32 so bf16 activations stay stable.

    `affine=False` is used before AdaLN, whose scale already plays the role of the weight.
    """

    def __init__(self, dim: int, eps: float = 1e-6, affine: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        y = y.to(x.dtype)
        return y * self.weight if self.weight is not None else y


class HeadRMSNorm(nn.Module):
    """QK-norm with its own weight per head (H, hd), as Echo has; x is (B, H, T, hd)."""

    def __init__(self, n_heads: int, head_dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n_heads, head_dim))

    def forward(self, x: Tensor) -> Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight[:, None, :].float()).to(x.dtype)


def qk_norm(n_heads: int, head_dim: int, eps: float, per_head: bool) -> nn.Module:
    """One weight per head (Echo) or one shared by all heads."""
    return HeadRMSNorm(n_heads, head_dim, eps) if per_head else RMSNorm(head_dim, eps)


class SwiGLU(nn.Module):
    """Gated MLP: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # (..., dim)


def rope_tables(n_pos: int, head_dim: int, theta: float, device: torch.device) -> tuple[Tensor, Tensor]:
    """cos and sin tables, each (n_pos, head_dim/2), for positions 0..n_pos-1.

    Positions are absolute indices, so right padding never moves a real token.
    """
    half = head_dim // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32, device=device) / half)  # (half,)
    angles = torch.arange(n_pos, dtype=torch.float32, device=device)[:, None] * freqs  # (n_pos, half)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the two halves of each head of x (B, H, T, hd) by the angles of cos/sin (T, hd/2)."""
    x1, x2 = x.float().chunk(2, dim=-1)  # (B, H, T, hd/2) each
    out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return out.to(x.dtype)


def timestep_features(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal features (B, dim) of t in [0, 1], scaled by 1000 so low frequencies still
    separate nearby t."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = 1000.0 * t.float()[:, None] * freqs[None]  # (B, half)
    return torch.cat([args.cos(), args.sin()], dim=-1)  # (B, dim)


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    """AdaLN: x (B, T, d) scaled and shifted per sample by (B, 1, d) tensors."""
    return x * (1 + scale) + shift


class LowRankAdaLN(nn.Module):
    """A block's private correction (B, 6d) to the shared modulation: up(down(c)).

    Sharing the full-rank part across blocks and keeping only a rank-r residual per block cuts
    AdaLN parameters from 6d² per block to (d + 6d)·r. `up` starts at zero so every block
    starts from the shared modulation.
    """

    def __init__(self, dim: int, rank: int) -> None:
        super().__init__()
        self.down = nn.Linear(dim, rank, bias=False)
        self.up = nn.Linear(rank, 6 * dim, bias=False)

    def forward(self, c: Tensor) -> Tensor:
        return self.up(self.down(c))  # (B, 6d)


class EchoAdaLN(nn.Module):
    """Echo's AdaLN: from the shared (B, 1, 3d) modulation, each of shift, scale and gate gets a
    private low-rank correction up(down(silu(chunk))) + chunk; x is RMS-normalised and modulated
    in float32 (bf16 modulation of a normalised stream loses the small shifts). Returns the
    modulated x in its dtype and the tanh gate."""

    def __init__(self, dim: int, rank: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        for name in ("shift", "scale", "gate"):
            setattr(self, f"{name}_down", nn.Linear(dim, rank, bias=False))
            setattr(self, f"{name}_up", nn.Linear(rank, dim, bias=True))

    def forward(self, x: Tensor, mod: Tensor) -> tuple[Tensor, Tensor]:
        # x: (B, T, d); mod: (B, 1, 3d)
        shift, scale, gate = (
            getattr(self, f"{name}_up")(getattr(self, f"{name}_down")(F.silu(chunk))) + chunk
            for name, chunk in zip(("shift", "scale", "gate"), mod.chunk(3, dim=-1))
        )
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        y = y * (1 + scale.float()) + shift.float()
        return y.to(x.dtype), torch.tanh(gate)


def key_mask_for_attention(key_mask: Tensor) -> Tensor:
    """(B, S) True=attend -> (B, 1, 1, S) boolean SDPA mask with no empty row.

    A row with no key at all would give softmax over nothing (NaN); such a row can only come
    from a sample with no real position, whose outputs are padding anyway, so it is let attend
    everywhere instead.
    """
    empty = ~key_mask.any(dim=-1, keepdim=True)  # (B, 1)
    return (key_mask | empty)[:, None, None, :]
