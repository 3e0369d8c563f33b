"""Top-k selection as torch ops on the tensor's own device: the same indices as
`protocol.codecs_sparse.topk_indices`, so a GPU peer's frames are a CPU peer's, bit for bit.

Only the k indices (and the values at them) then cross to the host for the index code, lz4 and
signing: at 1% that is 12 bytes a kept entry against 4 bytes of every parameter for a copy of the
whole vector (docs/performance.md, "Where the arithmetic runs").

Order: each |x_i| is read as the int32 bit pattern of its float32 widening with the sign cleared,
which orders non-negative floats as numbers; every NaN is given one pattern above +inf, so NaNs
rank above every number and tie with each other. Ties at the k-th magnitude go to the lowest
indices. That is `topk_indices`'s rule, so the two agree on any input, NaN, ±inf, ±0 and
subnormals included.

How: a threshold read from a strided sample (a little below its share of the k largest, as the
numpy path does) passes a few more than k entries in one chunked pass; the k-th largest key is
found among those few by a sort, and the entries above it plus the first ties are kept. Where the
sample misleads (skewed data passes fewer than k, or ties pass far more), the k-th key is found by
bisection over the 31-bit keys, a counting pass each (about 31), and the entries are picked chunk
by chunk: no temporary grows with the vector beyond the k indices returned and a chunk's keys and
mask.
"""

from __future__ import annotations

import math

import torch

from .codec_input import DEVICE_PIECE

__all__ = ["device_topk_indices", "magnitude_keys"]

_NAN_KEY = 0x7F800001
"""Every NaN's key: above +inf's 0x7F800000, the same for all, as numpy's selection ranks them."""
_SAMPLE = 1 << 15
_MARGIN_SIGMAS = 4.0


def magnitude_keys(x: torch.Tensor) -> torch.Tensor:
    """int32 keys of |x| (float32 or bfloat16, 1-D) that order as the magnitudes do (see the module
    docstring); a new tensor on x's device."""
    wide = x.to(torch.float32) if x.dtype != torch.float32 else x
    keys = wide.view(torch.int32) & 0x7FFFFFFF
    return keys.masked_fill_(keys > 0x7F800000, _NAN_KEY)


def _chunks(n: int, chunk: int) -> range:
    return range(0, n, max(1, chunk))


def _count_at_or_above(x: torch.Tensor, key: int, chunk: int) -> int:
    return sum(int((magnitude_keys(x[s:s + chunk]) >= key).sum()) for s in _chunks(x.numel(), chunk))


def _kth_by_bisection(x: torch.Tensor, k: int, chunk: int) -> int:
    """The k-th largest key of x: the largest key t with at least k keys at or above it."""
    low, high = 0, _NAN_KEY  # count(>= low) >= k always; find the largest such t
    while low < high:
        mid = (low + high + 1) // 2
        if _count_at_or_above(x, mid, chunk) >= k:
            low = mid
        else:
            high = mid - 1
    return low


def _sampled_threshold(x: torch.Tensor, k: int) -> int | None:
    """A key a few more than k entries are expected at or above, from a strided sample; None where
    the sample says that is (nearly) every entry."""
    n = x.numel()
    sample = magnitude_keys(x[::max(1, n // _SAMPLE)])
    expected = k * sample.numel() / n
    rank = math.ceil(expected + _MARGIN_SIGMAS * math.sqrt(expected) + 1)
    if rank >= sample.numel():
        return None
    return int(torch.sort(sample).values[sample.numel() - rank])


def _candidates(x: torch.Tensor, threshold: int, chunk: int,
                limit: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(int64 indices in order, their keys) of the entries whose key is at least `threshold`;
    None once more than `limit` pass (a threshold on a heavily tied value)."""
    found_at, found_keys, found = [], [], 0
    for s in _chunks(x.numel(), chunk):
        keys = magnitude_keys(x[s:s + chunk])
        passed = keys >= threshold
        found_at.append(torch.nonzero(passed).view(-1) + s)
        found_keys.append(keys[passed])
        found += found_at[-1].numel()
        if found > limit:
            return None
    return torch.cat(found_at), torch.cat(found_keys)


def _select(x: torch.Tensor, kth: int, k: int, chunk: int) -> torch.Tensor:
    """The entries above the k-th largest key `kth` and the first ties at it, chunk by chunk:
    however many entries tie, no more than k indices and a chunk's keys are held."""
    ties_left = k - (0 if kth >= _NAN_KEY else _count_at_or_above(x, kth + 1, chunk))
    out = []
    for s in _chunks(x.numel(), chunk):
        keys = magnitude_keys(x[s:s + chunk])
        keep = keys > kth
        if ties_left:
            ties = torch.nonzero(keys == kth).view(-1)[:ties_left]
            keep[ties] = True
            ties_left -= ties.numel()
        out.append(torch.nonzero(keep).view(-1) + s)
    return torch.cat(out)


def _keep(at: torch.Tensor, keys: torch.Tensor, kth: int, k: int) -> torch.Tensor:
    """Of candidates in index order, those above `kth` and the first ties at it, k in all."""
    keep = keys > kth
    ties = torch.nonzero(keys == kth).view(-1)
    keep[ties[:k - int(keep.sum())]] = True
    return at[keep]


def device_topk_indices(x: torch.Tensor, k: int, chunk: int = DEVICE_PIECE) -> torch.Tensor:
    """Sorted int64 indices (on x's device) of the k largest |x_i| of a 1-D float32 or bfloat16
    tensor: ties to the lowest indices, NaN largest; `topk_indices`'s indices exactly."""
    if x.dim() != 1 or x.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"top-k reads a 1-D float32 or bfloat16 tensor, got {x.dtype} of {x.dim()} dims")
    n = x.numel()
    if not 0 <= k <= n:
        raise ValueError(f"top-k of {k} entries from {n}")
    if k == n:
        return torch.arange(n, dtype=torch.int64, device=x.device)
    if k == 0:
        return torch.zeros(0, dtype=torch.int64, device=x.device)
    x = x.detach()
    threshold = _sampled_threshold(x, k)
    if threshold is not None:
        found = _candidates(x, threshold, chunk, limit=2 * k + _SAMPLE)
        if found is not None and found[0].numel() >= k:
            at, keys = found
            kth = int(torch.sort(keys).values[keys.numel() - k])
            return _keep(at, keys, kth, k)
    return _select(x, _kth_by_bisection(x, k, chunk), k, chunk)
