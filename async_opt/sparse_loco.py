"""SparseLoCo's message (Sarfi et al. 2025): a pseudo-gradient cut to its top k entries, each
sent in 2 bits, with error feedback so that what a round leaves out is sent in a later one.

Each worker keeps an accumulator ``a``; per outer step ``a = β a + Δ``, the message is
``C(a)`` (top-k then 2-bit quantisation) and ``a −= C(a)``. With ``β = 1`` this is classic
error feedback (Karimireddy et al. 2019, EF-SGD): the sum of what was sent trails the sum of
pseudo-gradients by ``a`` alone, which stays bounded. SparseLoCo replaces DiLoCo's outer
momentum with this accumulator, ``β < 1`` being its decay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["SparseMessage", "ErrorFeedback", "top_k_two_bit", "kept", "message_bytes"]

LEVEL_BYTES = 8
"""The two magnitudes of the 2-bit code, as float32, sent once per message."""


def kept(numel: int, fraction: float) -> int:
    """Entries a SparseLoCo message keeps of ``numel`` (Sarfi et al. 2025: 1–3%), at least one."""
    return max(1, round(fraction * numel))


def message_bytes(numel: int, k: int) -> int:
    """Bytes on the wire of a top-k, 2-bit message (Sarfi et al. 2025): each kept entry's index
    (``ceil(log2 numel)`` bits) and 2-bit code, packed, plus the two float32 magnitudes."""
    index_bits = max(1, math.ceil(math.log2(numel)))
    return math.ceil(k * (index_bits + 2) / 8) + LEVEL_BYTES


@dataclass(frozen=True)
class SparseMessage:
    """A top-k, 2-bit message of SparseLoCo (Sarfi et al. 2025): positions, one sign bit and one
    magnitude bit each, and the two magnitudes (``low``, ``high``)."""

    indices: Tensor
    codes: Tensor
    low: float
    high: float
    numel: int

    def dense(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """The vector the receivers reconstruct: zero off the kept positions."""
        out = torch.zeros(self.numel, dtype=dtype)
        mags = torch.where(self.codes & 1 == 1, self.high, self.low).to(dtype)
        out[self.indices] = torch.where(self.codes & 2 == 2, -mags, mags)
        return out

    def nbytes(self) -> int:
        """Bytes on the wire (:func:`message_bytes`)."""
        return message_bytes(self.numel, self.indices.numel())


def top_k_two_bit(v: Tensor, k: int) -> SparseMessage:
    """The ``k`` largest-magnitude entries of ``v``, each as a sign and one of two magnitudes: the
    mean magnitude of the smaller half of the kept entries and of the larger half (one step of
    a two-level Lloyd quantiser; Sarfi et al. 2025 send the kept values in 2 bits)."""
    flat = v.detach().reshape(-1)
    if not 1 <= k <= flat.numel():
        raise ValueError(f"top_k_two_bit: k must be in [1, {flat.numel()}], got {k}")
    idx = flat.abs().topk(k).indices.sort().values
    vals = flat[idx].double()
    mags = vals.abs()
    upper = torch.zeros(k, dtype=torch.bool)
    upper[mags.argsort()[k // 2:]] = True
    high = float(mags[upper].mean())
    low = float(mags[~upper].mean()) if bool((~upper).any()) else high
    codes = upper.to(torch.uint8) | ((vals < 0).to(torch.uint8) << 1)
    return SparseMessage(idx, codes, low, high, flat.numel())


class ErrorFeedback:
    """One worker's SparseLoCo accumulator (Sarfi et al. 2025; error feedback as in Karimireddy
    et al. 2019): compresses ``β a + Δ`` and keeps what the message left out."""

    def __init__(self, fraction: float, decay: float) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay!r}")
        self.fraction, self.decay = fraction, decay
        self.acc: Tensor | None = None

    def compress(self, delta: Tensor) -> SparseMessage:
        """The message for this round's pseudo-gradient ``delta``; the rest stays in the accumulator."""
        flat = delta.detach().reshape(-1).double()
        self.acc = flat.clone() if self.acc is None else self.acc.mul_(self.decay).add_(flat)
        msg = top_k_two_bit(self.acc, kept(flat.numel(), self.fraction))
        self.acc.sub_(msg.dense(torch.float64))
        return msg
