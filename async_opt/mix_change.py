"""The consensus step a mix adds, built from the neighbour copies a piece at a time.

CHOCO-SGD's consensus step ``Σ_j λ_j · clip(x̂_j − x̂_i, ρ)`` (Koloskova et al. 2019; clipped as
in He, Karimireddy & Jaggi 2022) is a parameter-sized vector. `mix_delta` builds every
difference whole; `MixChange` builds any slice of the step from the copies themselves, so a
trainer can add it to its parameters one tensor at a time (`peer.boundary`) and no
parameter-sized float32 change is ever allocated, and `mix_delta_of_copies` builds it whole in one
buffer. Each entry gets the same operations in the same order as in `mix_delta`: the same bits.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from .mixing import _pulls, _sub_into, piece_for


class MixChange:
    """CHOCO-SGD's consensus step (Koloskova et al. 2019) ``Σ_j λ_j · clip(x̂_j − x̂_i, ρ)`` over
    ``copies`` (``(x̂_j, λ_j, ||x̂_j − x̂_i||)``), read by slice.

    Only copies that move x count (`_pulls`); `moves` is False when none does."""

    def __init__(self, public: Tensor, copies: Sequence[tuple[Tensor, float, float]], rho: float | None,
                 power: float = 1.0) -> None:
        self.shape = public.shape
        self._ref = public.detach().reshape(-1)
        self._flat = [(x.detach().reshape(-1), w) for x, w in _pulls(copies, rho, power, per_copy=True)]
        for x, _ in self._flat:
            if x.shape != self._ref.shape:
                raise ValueError(f"a copy of shape {tuple(x.shape)} against a public copy of {tuple(self.shape)}")
        self.dtype = torch.promote_types(self._ref.dtype, torch.float32)  # half-width copies mix in float32
        self.moves = bool(self._flat)

    def numel(self) -> int:
        """Entries in the step: the parameters'."""
        return self._ref.numel()

    def piece(self, part: slice, out: Tensor | None = None) -> Tensor:
        """The step's entries in `part` of the flattened parameters (into `out` when given), built a
        `PIECE` at a time: each piece of every difference stays in a core's cache while it is weighed
        and summed, so x̂_i and each x̂_j are read once."""
        start, stop, _ = part.indices(self.numel())
        if out is None:
            out = torch.empty(stop - start, dtype=self.dtype, device=self._ref.device)
        if not self._flat:
            return out.zero_()
        step = piece_for(self._ref)
        diff = torch.empty(min(step, max(stop - start, 1)), dtype=self.dtype, device=self._ref.device)
        for at in range(start, stop, step):
            cut = slice(at, min(at + step, stop))
            piece = out[at - start:cut.stop - start]
            d = diff[:piece.numel()]
            for i, (x, w) in enumerate(self._flat):
                _sub_into(d, x[cut], self._ref[cut])
                if i == 0:
                    torch.mul(d, w, out=piece)
                else:
                    piece.add_(d, alpha=w)
        return out

    def whole(self) -> Tensor:
        """The step as one new tensor shaped like the public copy."""
        return self.piece(slice(0, self.numel())).view(self.shape)


def mix_delta_of_copies(public: Tensor, copies: Sequence[tuple[Tensor, float, float]], rho: float | None,
                        power: float = 1.0) -> Tensor | None:
    """`mix_delta` (per copy) from the copies themselves, ``(x̂_j, λ_j, ||x̂_j − x̂_i||)``, or None when
    nothing moves x: `MixChange` whole, in one new buffer (Koloskova et al. 2019's consensus step)."""
    change = MixChange(public, copies, rho, power)
    return change.whole() if change.moves else None
