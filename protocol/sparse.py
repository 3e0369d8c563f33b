"""A decoded vector as the entries its codec kept: what an update frame holds before it is added.

A top-k update keeps a tenth of the entries or fewer; expanded to the whole model it would cost
a model-sized allocation, a scatter, a finiteness scan and a dense addition, on every frame a
peer sends or receives. Kept sparse, adding it to a copy costs one copy of that copy (copies
are never written in place: another thread may be reading them) and an indexed add of the k
entries; its norm and its finiteness are read from the k values
(docs/benchmarks/protocol-cpu.md#protocol-cpu-per-publish-period).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .codec_input import DEVICE_PIECE
from .finite import all_finite

__all__ = ["SparseVector"]

_HALF = (torch.bfloat16, torch.float16)
_PIECE = 1 << 17
"""Entries summed at a time into a half-width copy on the CPU: 512 KiB of float32, in a core's cache
(`DEVICE_PIECE` elsewhere)."""


@dataclass(frozen=True, eq=False)
class SparseVector:
    """A flat float32 vector of `numel` entries: `values` at `indices`, zero elsewhere.

    `indices` is None when every entry is kept (a dense codec): then `values` holds all
    `numel`. Indices, where present, are distinct and sorted, as the codecs produce them; the
    decoder checks that of what arrives (`protocol.codecs_sparse.ef_decode`), so this class
    only checks shapes and types. Two vectors compare by identity, as tensors cannot say
    "equal" in one bool.
    """

    numel: int
    values: torch.Tensor
    indices: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.values.dtype != torch.float32 or self.values.dim() != 1:
            raise ValueError(f"values must be a 1-D float32 tensor, "
                             f"got {self.values.dtype} of {self.values.dim()} dims")
        if self.indices is None:
            if self.values.numel() != self.numel:
                raise ValueError(f"a dense vector holds all {self.numel} entries, got {self.values.numel()}")
        elif self.indices.dtype != torch.int64 or self.indices.shape != self.values.shape:
            raise ValueError(f"indices must be int64 and as many as the values ({self.values.numel()}), "
                             f"got {self.indices.dtype} of shape {tuple(self.indices.shape)}")

    @classmethod
    def of_dense(cls, x: torch.Tensor) -> "SparseVector":
        """The whole of a 1-D float32 tensor (not copied)."""
        return cls(numel=x.numel(), values=x)

    @classmethod
    def of_arrays(cls, numel: int, values: np.ndarray, indices: np.ndarray) -> "SparseVector":
        """Kept float32 values at sorted int64 indices, from a codec's numpy arrays (not copied)."""
        return cls(numel=numel, values=torch.from_numpy(values), indices=torch.from_numpy(indices))

    @property
    def kept(self) -> int:
        """Entries stored."""
        return self.values.numel()

    def dense(self) -> torch.Tensor:
        """The whole vector as a new tensor (or `values` itself when dense)."""
        if self.indices is None:
            return self.values
        return torch.zeros(self.numel, dtype=torch.float32).index_copy_(0, self.indices, self.values)

    def added_to(self, x: torch.Tensor) -> torch.Tensor:
        """x + this vector as a new tensor, in x's dtype and device; x is not written.

        Into a half-width `x` (a bfloat16 public copy) each entry is summed in float32 and rounded
        once: sender and receivers of a copy then round alike, bit for bit, on any device."""
        if x.numel() != self.numel:
            raise ValueError(f"cannot add a vector of {self.numel} entries to one of {x.numel()}")
        if x.dtype not in _HALF and self.indices is None:
            return x + self.values.to(device=x.device, dtype=x.dtype)
        return self.add_into(x.clone())

    def add_into(self, out: torch.Tensor) -> torch.Tensor:
        """out += this vector, in place, rounded as `added_to` rounds: into a half-width `out` each
        entry is summed in float32 and rounded once, a piece at a time (no float32 temporary the
        size of `out`, nor of the kept entries: at a dense top-k those are nearly as many)."""
        if out.numel() != self.numel:
            raise ValueError(f"cannot add a vector of {self.numel} entries to one of {out.numel()}")
        values = self.values.to(device=out.device)
        if out.dtype not in _HALF:
            if self.indices is None:
                return out.add_(values.to(dtype=out.dtype).view_as(out))
            out.view(-1).index_add_(0, self.indices.to(out.device), values.to(dtype=out.dtype))
            return out
        piece = _PIECE if out.device.type == "cpu" else DEVICE_PIECE
        if self.indices is not None:
            flat_out, at_all = out.view(-1), self.indices.to(out.device)
            for start in range(0, self.kept, piece):  # index_select/index_copy_: advanced indexing is slower
                at = at_all[start:start + piece]
                summed = flat_out.index_select(0, at).to(torch.float32)
                flat_out.index_copy_(0, at, summed.add_(values[start:start + piece]).to(out.dtype))
            return out
        flat_out, flat_values = out.view(-1), values.view(-1)
        for start in range(0, self.numel, piece):
            part = slice(start, start + piece)
            flat_out[part] = (flat_out[part].to(torch.float32) + flat_values[part]).to(out.dtype)
        return out

    def norm(self) -> float:
        """The Euclidean norm, float32 first and float64 only where that overflowed (finite
        values always get a finite norm; NaN or ±inf a non-finite one)."""
        n = float(torch.linalg.vector_norm(self.values))
        return n if math.isfinite(n) else float(torch.linalg.vector_norm(self.values.double()))

    def max_abs(self) -> float:
        """The largest |entry| (0 for no entries; inf where one is NaN or infinite)."""
        if self.values.numel() == 0:
            return 0.0
        low, high = torch.aminmax(self.values)  # one pass, no |values| temporary
        low, high = float(low), float(high)
        return max(-low, high) if math.isfinite(low) and math.isfinite(high) else math.inf

    def all_finite(self) -> bool:
        """Whether no entry is NaN or infinite (the zeros between kept entries are)."""
        return all_finite(self.values)

    def finite_where_set(self, x: torch.Tensor) -> bool:
        """Whether `x` is finite at every entry this vector sets: after `x = self.added_to(x0)`
        with x0 finite, the only entries that can have overflowed."""
        if self.indices is None:
            return all_finite(x.detach())
        return all_finite(x.detach().reshape(-1).index_select(0, self.indices.to(x.device)))
