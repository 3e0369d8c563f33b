"""A codec's input: a float32 or bfloat16 vector, read as float32 a piece at a time.

The codecs' arithmetic (magnitudes, scales, clamps, casts) is float32 and numpy has no bfloat16,
so a bfloat16 delta (a residual taken in a bfloat16 public copy) is widened before it is read.
bfloat16 -> float32 is exact, so every frame and reconstruction is the one its float32 widening
would give, bit for bit; widening it a piece at a time into a scratch array a piece long keeps a
float32 copy of the whole delta, twice the bfloat16 one, from ever being made. A float32 vector
is read in place: its pieces are views of it.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch

__all__ = ["CodecInput", "INPUT_DTYPES", "PIECE", "DEVICE_PIECE"]

INPUT_DTYPES = (torch.float32, torch.bfloat16)
"""What a codec reads; anything else is a caller bug."""
PIECE = 1 << 18
"""Entries of a bfloat16 input widened at a time: 1 MiB of float32, in a core's cache."""
DEVICE_PIECE = 1 << 24
"""Entries a piecewise pass reads at a time off the CPU: each piece is kernel launches and, where
its answer is read, a wait for the device, so pieces are long (16 MiB of flags, 64 MiB of float32),
and still far shorter than a large model."""


class CodecInput:
    """A 1-D float32 or bfloat16 CPU vector as the codecs read it: float32 numpy pieces.

    `widened` is True for bfloat16: its pieces are new float32 values (written into scratch the
    caller or this object owns), never views of the input."""

    def __init__(self, x: torch.Tensor | np.ndarray) -> None:
        if isinstance(x, np.ndarray):  # a float32 array, as the codecs' numpy callers hand them
            if x.dtype != np.float32 or x.ndim != 1:
                raise ValueError(f"codec input must be a 1-D float32 array, got {x.dtype} shape {x.shape}")
            x = torch.from_numpy(x)
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"codec input must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype not in INPUT_DTYPES or x.dim() != 1 or x.device.type != "cpu":
            raise ValueError(f"codec input must be a 1-D float32 or bfloat16 CPU tensor, got "
                             f"{x.dtype} shape {tuple(x.shape)} on {x.device}")
        self._tensor = x.detach().contiguous()
        self.widened = x.dtype == torch.bfloat16
        self.size = self._tensor.numel()
        self._array = None if self.widened else self._tensor.numpy()

    @classmethod
    def of(cls, x: "CodecInput | torch.Tensor | np.ndarray") -> "CodecInput":
        """`x` itself when it already is one."""
        return x if isinstance(x, CodecInput) else cls(x)

    def whole(self) -> np.ndarray:
        """All entries as float32: the vector itself, or for bfloat16 a widened copy (short vectors
        only: it is the float32 copy the pieces avoid)."""
        if self._array is not None:
            return self._array
        return self._tensor.to(torch.float32).numpy()

    def piece_into(self, start: int, stop: int, scratch: np.ndarray) -> np.ndarray:
        """Entries `start` to `stop` as float32: a view of the vector, or widened into
        `scratch[:stop - start]` (returned) for bfloat16."""
        if self._array is not None:
            return self._array[start:stop]
        out = scratch[:max(0, min(stop, self.size) - start)]
        torch.from_numpy(out).copy_(self._tensor[start:stop])
        return out

    def pieces(self, step: int) -> Iterator[tuple[int, np.ndarray]]:
        """(start, float32 entries) of each piece of `step` entries; a widened piece is valid only
        until the next one is read (they share one scratch array)."""
        scratch = np.empty(min(step, self.size) if self.widened else 0, np.float32)
        for start in range(0, self.size, step):
            yield start, self.piece_into(start, start + step, scratch)

    def strided(self, stride: int) -> np.ndarray:
        """Every `stride`-th entry from the first, as a new float32 array (a sample)."""
        if self._array is not None:
            return self._array[::stride]
        return self._tensor[::stride].to(torch.float32).numpy()

    def take(self, indices: np.ndarray) -> "CodecInput":
        """The entries at `indices`, in this vector's dtype: gathering bfloat16 moves two bytes an
        entry, and the values codec widens them as it reads them."""
        if self._array is not None:
            return CodecInput(np.ascontiguousarray(self._array[indices], dtype=np.float32))
        return CodecInput(self._tensor.index_select(0, torch.from_numpy(indices)))

    def mapped(self, fn: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        """An elementwise `fn` of the float32 entries, as one new tensor of `dtype`: one call on
        the whole of a float32 vector, a piece at a time into the result for bfloat16."""
        if self._array is not None:
            return fn(self._tensor)
        out = torch.empty(self.size, dtype=dtype)
        for start, piece in self.pieces(PIECE):
            out[start:start + piece.size] = fn(torch.from_numpy(piece))
        return out
