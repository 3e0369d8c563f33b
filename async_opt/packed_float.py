"""Three bytes a value: the top 24 bits of a float32, a 16-bit significand.

The averaged weights are an EMA whose late samples move it by less than bfloat16 can resolve:
at step t a sample weighs about (γ + 1)·gap / t, far below bfloat16's 2⁻⁸ once t is in the
thousands, so a bfloat16 average rounded to nearest stops moving. float32 holds it with room to
spare, at 4 bytes. Here each value keeps its float32's top two bytes (sign, exponent and the
significand's top bits: a bfloat16, as an int16) and the next byte, and is rounded to them
stochastically: a random byte is added to the bits dropped, so what a sample adds below the
last place kept is kept in expectation (the carry runs into the exponent as it should), and
the error the average carries stays a few last places (an EMA forgets old rounding errors as
it forgets old samples).

Device-generic torch; randomness only from the generator the caller passes; no state but the
two tensors and a version that an in-place write makes odd while it runs, so a reader on
another thread can tell a torn read (`PackedFloats.read`).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .mixing import piece_for

_NEAREST = 1 << 7
"""Added to the dropped byte to round to nearest (half a last place)."""


def random_bytes(n: int, generator: torch.Generator, device: torch.device) -> Tensor:
    """`n` int32 values uniform in [0, 256), drawn from `generator`: the low byte of each half of
    random int64s (only an int64's top bit is not random), a quarter the cost of drawing floats."""
    halves = torch.empty((n + 1) // 2, dtype=torch.int64, device=device).random_(generator=generator)
    return halves.view(torch.int32)[:n].bitwise_and_(0xFF)


def pack_into(values: Tensor, hi: Tensor, lo: Tensor, noise: Tensor | None) -> None:
    """Write float32 `values` as (`hi` int16, `lo` uint8): `noise` (`random_bytes`) rounds them
    stochastically, None to nearest."""
    bits = values.view(torch.int32) + (noise if noise is not None else _NEAREST)
    hi.copy_(bits >> 16)
    lo.copy_((bits >> 8).bitwise_and_(0xFF))


def unpack(hi: Tensor, lo: Tensor) -> Tensor:
    """float32 values of (`hi`, `lo`)."""
    return (hi.to(torch.int32) << 16).bitwise_or_(lo.to(torch.int32) << 8).view(torch.float32)


class PackedFloats:
    """A flat float32 vector held in three bytes a value (module docstring)."""

    def __init__(self, values: Tensor) -> None:
        flat = values.detach().reshape(-1).to(torch.float32).contiguous()
        self.hi = torch.empty(flat.shape, dtype=torch.int16, device=flat.device)
        self.lo = torch.empty(flat.shape, dtype=torch.uint8, device=flat.device)
        pack_into(flat, self.hi, self.lo, None)
        self.shape = tuple(values.shape)
        self.version = 0
        """Even when no write is under way; each in-place write adds one before and one after."""

    def numel(self) -> int:
        return self.hi.numel()

    def unpacked(self) -> Tensor:
        """The values as a new float32 tensor (not safe against a concurrent write: see `read`)."""
        return unpack(self.hi, self.lo).view(self.shape)

    def read(self, attempts: int = 8, pause: Callable[[], None] | None = None) -> Tensor | None:
        """The values as a new float32 tensor, from any thread: None when a write overlapped every
        one of `attempts` reads. `pause` runs between attempts (a caller that must have the values
        waits there: at the sizes users train one write takes seconds)."""
        for attempt in range(attempts):
            if attempt and pause is not None:
                pause()
            before = self.version
            if before % 2:
                continue
            out = self.unpacked()
            if self.version == before:
                return out
        return None

    def lerp_(self, target: Callable[[slice], Tensor], weight: float, generator: torch.Generator) -> None:
        """In place: each value moves `weight` of the way to `target(piece)` (float32 values of that
        slice), a piece at a time (`async_opt.mixing.piece_for`), rounded stochastically from `generator`."""
        self.version += 1
        try:
            step = piece_for(self.hi)
            for start in range(0, self.numel(), step):
                part = slice(start, start + step)
                hi, lo = self.hi[part], self.lo[part]
                values = unpack(hi, lo).lerp_(target(part).to(torch.float32), weight)
                pack_into(values, hi, lo, random_bytes(values.numel(), generator, values.device))
        finally:
            self.version += 1
