"""Random-k's indices, drawn from the shared codec seed so that only the values travel.

One index in each of k equal strata of [0, N), picked with SplitMix64 (Steele et al. 2014), which
is spelt out here so that every peer, whatever its numpy or torch version, draws the same indices.
"""

from __future__ import annotations

import numpy as np

from .errors import CodecError

__all__ = ["randk_indices"]

_MASK64 = (1 << 64) - 1


def _splitmix64(seed: int, count: int) -> np.ndarray:
    """SplitMix64 outputs 1..count for `seed` (Steele, Lea, Flood 2014)."""
    z = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z += np.uint64(seed & _MASK64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def randk_indices(n: int, k: int, seed: int) -> np.ndarray:
    """k sorted distinct indices: one uniform pick in each stratum [jn/k, (j+1)n/k)."""
    if k == 0:
        return np.zeros(0, np.int64)
    if k >= 1 << 31:
        raise CodecError(f"randk: k = {k} is too large")
    j = np.arange(k + 1, dtype=np.int64)
    starts = j * (n // k) + (j * (n % k)) // k  # floor(j n / k) without overflowing int64
    widths = np.diff(starts).astype(np.uint64)
    return starts[:-1] + (_splitmix64(seed, k) % widths).astype(np.int64)
