"""One finiteness test for the hot paths: the node's publish, the frame builders, the decoder.

`torch.isfinite(x).all()` builds a bool tensor in several passes, on every publish and every
decoded frame. numpy's vectorised `isfinite` gives the same answer many times faster
(docs/benchmarks/peer.md#finiteness-checks-and-index-decoding), so CPU float32/float64 tensors go
through it.
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
