"""One finiteness test for the hot paths: the node's publish, the frame builders, the decoder.

`torch.isfinite(x).all()` builds a bool tensor in several passes: about 2.7 ms for 1.1M
float32 values on one thread, on every publish and every decoded frame. numpy's vectorised `isfinite` gives the
same answer in about 0.1 ms, so CPU float32/float64 tensors go through it.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["all_finite"]

_NUMPY_DTYPES = (torch.float32, torch.float64)


def all_finite(x: torch.Tensor) -> bool:
    """Whether no entry of `x` is NaN or infinite (integer tensors always are finite)."""
    if x.device.type == "cpu" and x.dtype in _NUMPY_DTYPES:
        return bool(np.isfinite(x.detach().numpy()).all())
    return bool(torch.isfinite(x).all())
