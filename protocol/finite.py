"""One finiteness test for the hot paths: the node's publish, the frame builders, the decoder.

`torch.isfinite(x).all()` builds a bool tensor in several passes, on every publish and every
decoded frame. numpy's vectorised `isfinite` gives the same answer many times faster
(docs/benchmarks/peer.md#finiteness-checks-and-index-decoding), so CPU float32/float64 tensors go
through it. torch's test of half-width tensors is slower still, so CPU bfloat16 and float16 ones
are read as their 16-bit patterns: an entry is NaN or infinite exactly when its exponent bits are
all set. All run a piece at a time: a whole-vector test would allocate a bool per entry, a
quarter of a float32 copy of the model at every publish and frame.
"""

from __future__ import annotations

import numpy as np
import torch

from .codec_input import DEVICE_PIECE as _DEVICE_PIECE
from .codec_input import PIECE as _PIECE  # entries tested at a time: the piece a codec reads

__all__ = ["all_finite"]

_NUMPY_DTYPES = (torch.float32, torch.float64)
_EXPONENT_BITS = {torch.bfloat16: np.int16(0x7F80), torch.float16: np.int16(0x7C00)}


def all_finite(x: torch.Tensor) -> bool:
    """Whether no entry of `x` is NaN or infinite (integer tensors always are finite)."""
    if x.device.type == "cpu" and x.dtype in _EXPONENT_BITS:
        return _bits_finite(x.detach().reshape(-1).view(torch.int16).numpy(), _EXPONENT_BITS[x.dtype])
    if x.numel() <= _PIECE:
        if x.device.type == "cpu" and x.dtype in _NUMPY_DTYPES:
            return bool(np.isfinite(x.detach().numpy()).all())
        return bool(torch.isfinite(x).all())
    flat = x.detach().reshape(-1)
    if flat.device.type == "cpu" and flat.dtype in _NUMPY_DTYPES:
        values = flat.numpy()
        flags = np.empty(_PIECE, bool)
        for start in range(0, values.size, _PIECE):
            piece = values[start:start + _PIECE]
            if not np.isfinite(piece, out=flags[:piece.size]).all():
                return False
        return True
    piece = _PIECE if flat.device.type == "cpu" else _DEVICE_PIECE
    return all(bool(torch.isfinite(flat[start:start + piece]).all()) for start in range(0, flat.numel(), piece))


def _bits_finite(bits: np.ndarray, exponent: np.int16) -> bool:
    """Whether no 16-bit pattern has all of `exponent`'s bits set, a piece at a time."""
    masked, flags = np.empty(min(_PIECE, bits.size), np.int16), np.empty(min(_PIECE, bits.size), bool)
    for start in range(0, bits.size, _PIECE):
        piece = bits[start:start + _PIECE]
        np.bitwise_and(piece, exponent, out=masked[:piece.size])
        if np.equal(masked[:piece.size], exponent, out=flags[:piece.size]).any():
            return False
    return True
