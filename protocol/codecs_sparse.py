"""Sparse codecs: top-k and random-k, with their kept values in any dense codec.

Top-k (Stich et al. 2018, "Sparsified SGD with memory"; Koloskova et al. 2019 use it in
CHOCO-SGD) keeps the k largest magnitudes and sends their indices as an Elias-Fano code
(Elias 1974, Fano 1971): 2 + floor(log2(N/k)) bits per index, about 8.6 bits at 1%, so
top-k 1% + int8 costs about 2.1 bytes per kept entry (~190x fewer bytes than fp32).

Top-k selection is exact and deterministic: the k largest |x_i|, ties at the k-th
magnitude going to the lowest indices, NaN ranking above every number (as in torch.topk).
On vectors of `TOPK_SAMPLED_MIN` entries or more, a threshold read a little below the
(1 - k/N) quantile of a strided sample of |x| first narrows the search to the entries at
or above it; when at least k entries pass, the k-th largest magnitude is among them, so
the selection over them equals the one over all of x (else that full one runs). This
costs about a fifth of a full top-k; the indices sent are the same either way. The scan
for candidates runs chunk by chunk, so a large vector is read from memory once.

Random-k draws its indices from the shared codec seed, so only the values travel: one
index in each of k equal strata of [0, N), picked with SplitMix64 (Steele et al. 2014),
which is spelt out here so that every peer, whatever its numpy or torch version, draws
the same indices. Values are not rescaled by N/k: error feedback needs a contraction,
not an unbiased estimate.

Error: ||x - x̂||^2 = sum of the dropped x_i^2 + the value codec's error on the kept ones.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import NamedTuple

import numpy as np
import torch

from .codec_input import CodecInput
from .codecs_dense import CodecBase, Layout, check_layout, check_numel, codec_input
from .elias_fano import ef_decode, ef_encode, ef_nbytes
from .errors import CodecError
from .sparse import SparseVector
from .randk import randk_indices
from .topk_device import device_topk_indices

__all__ = ["SparseCodec", "ef_encode", "ef_decode", "ef_nbytes", "randk_indices", "topk_indices",
           "TOPK_SAMPLED_MIN"]

TOPK_SAMPLED_MIN = 1 << 16
"""Vectors at least this long narrow top-k with a sampled threshold; shorter ones select directly."""
_TOPK_SAMPLE = 1 << 15  # about this many |x_i| estimate the threshold (partitioned in far less than a pass)
_TOPK_MARGIN_SIGMAS = 4.0  # threshold this many binomial sigmas below the sample's k-th value
_TOPK_CHUNK = 1 << 18  # entries per pass of the candidate scan: 1 MiB of |x|, within a core's cache
_TOPK_ONE_PASS_MAX = 1 << 22  # up to here whole-vector passes stay in cache: scan in one piece
_ORDER_SAMPLE = 1 << 12  # entries of the candidates that bound the few to drop (see `_order_statistic`)


def _order_statistic(pieces: list[np.ndarray], m: int) -> np.floating:
    """The (m+1)-th smallest entry of the pieces taken together (``np.partition`` of their
    concatenation at m), NaN ordered last, without concatenating them where it can.

    When m is a small share of the entries (the candidates top-k keeps most of), the entries below a
    bound read from a strided sample hold the m+1 smallest: then the m-th of those is the m-th of all,
    ties included, found in a partition of the few instead of all. Skewed data that puts m or fewer
    below the bound falls back to the partition of all; the value is the same either way.
    """
    n = sum(p.size for p in pieces)
    if n >= TOPK_SAMPLED_MIN and 4 * m <= n:
        stride = max(1, n // _ORDER_SAMPLE)
        sample = np.concatenate([p[::stride] for p in pieces])
        expected = (m + 1) * sample.size / n
        rank = math.ceil(expected + _TOPK_MARGIN_SIGMAS * math.sqrt(expected) + 1)
        if rank < sample.size:
            bound = np.partition(sample, rank)[rank]
            below = np.concatenate([p[p < bound] for p in pieces])  # NaN is never below: it stays last
            if below.size > m:
                return np.partition(below, m)[m]
    whole = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    return np.partition(whole, m)[m]


def _scan_step(n: int) -> int:
    """Entries a pass over a vector of n reads at a time: whole up to `_TOPK_ONE_PASS_MAX`, where
    whole-vector passes stay in cache, else `_TOPK_CHUNK`. On tens of millions of entries the
    memory traffic of whole-vector temporaries (|v|, comparisons, masks), not the arithmetic, is
    the cost, and each would be a parameter-sized allocation."""
    return max(1, n if n <= _TOPK_ONE_PASS_MAX else _TOPK_CHUNK)


class Candidates(NamedTuple):
    """The entries of one chunk of a vector that passed a threshold: where (from `start`, as int32:
    a chunk is far shorter than 2^31, a model need not be) and their magnitudes."""

    start: int
    positions: np.ndarray
    magnitudes: np.ndarray


def candidates_at_or_above(v: "np.ndarray | CodecInput", threshold: np.floating) -> list[Candidates]:
    """The entries with |v_i| >= threshold, NaN included, chunk by chunk in index order: 8 bytes
    a candidate, and no temporary the size of v. A bfloat16 v is widened a chunk at a time, into
    the chunk's magnitudes, however short it is: a whole-vector pass would widen all of it."""
    v = CodecInput.of(v)
    step = max(1, min(_TOPK_CHUNK, v.size)) if v.widened else _scan_step(v.size)
    mags, passed = np.empty(step, np.float32), np.empty(step, bool)
    found = []
    for start in range(0, v.size, step):
        chunk = v.piece_into(start, start + step, mags)
        m, keep = mags[:chunk.size], passed[:chunk.size]
        np.abs(chunk, out=m)
        np.less(m, threshold, out=keep)
        np.logical_not(keep, out=keep)  # NaN is never below: it passes
        at = np.flatnonzero(keep)
        found.append(Candidates(start, at.astype(np.int32), m.take(at)))
    return found


def _pick(pieces: list[Candidates], k: int, kth: np.floating, above: int) -> np.ndarray:
    """Sorted positions of the candidates strictly above `kth` (`above` of them, NaN counted above
    a number) and of the first k − above equal to it (NaN where `kth` is NaN)."""
    out = np.empty(k, np.int64)
    ties_left, filled = k - above, 0
    nan_kth = bool(np.isnan(kth))
    for piece in pieces:
        m = piece.magnitudes
        chosen = np.flatnonzero(np.isnan(m) if nan_kth else ~(m < kth))  # at or above, NaN included
        tied = np.arange(chosen.size) if nan_kth else np.flatnonzero(m[chosen] == kth)
        if tied.size > ties_left:  # ties past the k-th: the lowest positions keep theirs
            chosen = np.delete(chosen, tied[ties_left:])
            tied = tied[:ties_left]
        ties_left -= tied.size
        if filled + chosen.size > k:
            raise AssertionError("top-k picked more than k entries")  # kth and above disagree: a bug
        out[filled:filled + chosen.size] = piece.positions[chosen] + np.int64(piece.start)
        filled += chosen.size
    if filled != k:
        raise AssertionError(f"top-k picked {filled} of {k} entries")
    return out


def _select_largest(mags: np.ndarray, k: int) -> np.ndarray:
    """Sorted int64 positions of the k largest of `mags` (0 < k < size) in one pass over all of
    them; ties to the lowest positions, NaN above every number."""
    kth = np.partition(mags, mags.size - k)[mags.size - k]
    if np.isnan(kth):  # k or more NaNs: the first k of them
        return np.flatnonzero(np.isnan(mags))[:k]
    keep = ~(mags <= kth)  # strictly above the k-th value, NaN included
    ties = np.flatnonzero(mags == kth)
    keep[ties[:k - int(np.count_nonzero(keep))]] = True
    return np.flatnonzero(keep)


def topk_candidates(v: "np.ndarray | CodecInput", k: int) -> list[Candidates] | None:
    """A set of entries holding every one of the k largest |v_i| (`Candidates` per chunk
    scanned), or None (select over all).

    The threshold is the r-th largest of a strided sample, r set `_TOPK_MARGIN_SIGMAS`
    binomial sigmas above the sample's share of k, so that on most data slightly more than
    k entries pass. The sample is deterministic, so skewed data can defeat it: fewer than
    k entries pass and the caller falls back (correct, at the full selection's cost).
    """
    v = CodecInput.of(v)
    n = v.size
    if n < TOPK_SAMPLED_MIN:
        return None
    sample = np.abs(v.strided(n // _TOPK_SAMPLE))
    expected = k * sample.size / n
    rank = math.ceil(expected + _TOPK_MARGIN_SIGMAS * math.sqrt(expected) + 1)
    if rank >= sample.size:
        return None  # the threshold would pass (nearly) everything anyway
    threshold = np.partition(sample, sample.size - rank)[sample.size - rank]
    if np.isnan(threshold):
        return None
    candidates = candidates_at_or_above(v, threshold)
    return candidates if sum(c.positions.size for c in candidates) >= k else None


def topk_indices(v: "np.ndarray | CodecInput", k: int) -> np.ndarray:
    """Sorted int64 indices of the k largest |v_i|: ties to the lowest indices, NaN largest.

    The k-th largest magnitude is found among the candidates' magnitudes and the entries are
    picked from the candidates: besides the k indices returned, what is allocated is 8 bytes a
    candidate (about k of them) and a chunk's scratch, not a vector's worth of magnitudes, masks
    and indices. Where the sampled threshold fails, every entry is a candidate."""
    v = CodecInput.of(v)
    if k == v.size:
        return np.arange(k, dtype=np.int64)
    if k == 0:
        return np.zeros(0, np.int64)
    if v.size < TOPK_SAMPLED_MIN:  # short: one partition of all, the fewest numpy calls
        return _select_largest(np.abs(v.whole()), k)
    pieces = topk_candidates(v, k) or candidates_at_or_above(v, np.float32(0.0))
    magnitudes = [p.magnitudes for p in pieces]
    kth = _order_statistic(magnitudes, sum(m.size for m in magnitudes) - k)
    above = 0 if np.isnan(kth) else sum(int(np.count_nonzero(~(m <= kth))) for m in magnitudes)
    return _pick(pieces, k, kth, above)


def _canonical_fraction(text: str) -> str:
    return format(Decimal(text).normalize(), "f")


class SparseCodec(CodecBase):
    """k = ceil(fraction * N) entries (at least 1), chosen by `kind` ("topk" or "randk")."""

    def __init__(self, kind: str, fraction: str, values: CodecBase) -> None:
        if kind not in ("topk", "randk"):
            raise ValueError(f"sparse codec kind must be 'topk' or 'randk', got {kind!r}")
        frac = Fraction(fraction)
        if not 0 < frac <= 1:
            raise ValueError(f"{kind} fraction must be in (0, 1], got {fraction!r}")
        if isinstance(values, SparseCodec):
            raise ValueError("the values of a sparse codec must use a dense codec")
        self.kind, self.fraction, self.values = kind, frac, values
        suffix = "" if values.spec == "fp16" else f"+{'fp32' if values.spec == 'identity' else values.spec}"
        self.spec = f"{kind}:{_canonical_fraction(fraction)}{suffix}"

    def k(self, numel: int) -> int:
        if numel == 0:
            return 0
        return max(1, min(numel, math.ceil(self.fraction * numel)))

    def layout(self, numel: int) -> Layout:
        k = self.k(numel)
        out = dict(self.values.layout(k))
        if self.kind == "topk":
            hi, lo = ef_nbytes(numel, k)
            out.update(ihi=(np.dtype(np.uint8), hi), ilo=(np.dtype(np.uint8), lo))
        return out

    def _indices(self, v: CodecInput, k: int, seed: int) -> np.ndarray:
        if self.kind == "randk":
            return randk_indices(v.size, k, seed)
        return topk_indices(v, k)

    def _pack_indexed(self, v: CodecInput, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(packed arrays, the sorted indices they keep)."""
        idx = self._indices(v, self.k(v.size), seed)
        return self._pack_kept(v.take(idx), idx, v.size, seed), idx

    def _pack_kept(self, kept: CodecInput, idx: np.ndarray, numel: int, seed: int) -> dict[str, np.ndarray]:
        """The packed arrays of the values `kept` at the sorted indices `idx` of a vector of `numel`."""
        packed = self.values._encode(kept, seed)
        if self.kind == "topk":
            packed["ihi"], packed["ilo"] = ef_encode(idx, numel)
        return packed

    def _encode(self, v: CodecInput, seed: int) -> dict[str, np.ndarray]:
        return self._pack_indexed(v, seed)[0]

    def compress_sparse(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], SparseVector]:
        """(packed arrays, the exact vector `decompress_sparse` will rebuild from them).

        The reconstruction pairs the value codec's own decoding of the kept values with the
        indices chosen, instead of decoding the index code just written: `ef_decode` inverts
        `ef_encode` exactly and random-k's indices are a function of the seed, so the result
        is the receivers' bit for bit at a fraction of a decode's cost.
        """
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            return self.compress_where_held(x, seed)
        v = codec_input(x)
        packed, idx = self._pack_indexed(v, seed)
        return packed, SparseVector.of_arrays(v.size, self._kept(packed, idx.size, seed), idx)

    def compress_where_held(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], SparseVector]:
        """`compress_sparse` with the selection run as torch ops on x's own device (a GPU's, or
        the CPU's): only the k kept values, in x's dtype, and their indices cross to the host,
        where the value codec and the index code run on k entries. The same bits as
        `compress_sparse` on a CPU copy of x (`protocol.topk_device`); `compress_sparse` takes this
        path for any tensor off the CPU."""
        if not isinstance(x, torch.Tensor) or x.dim() != 1 or x.dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"codec input must be a 1-D float32 or bfloat16 tensor, got {x!r:.80}")
        x, n = x.detach(), x.numel()
        k = self.k(n)
        if self.kind == "topk":
            at = device_topk_indices(x, k)
            idx = at.cpu().numpy()
        else:
            idx = randk_indices(n, k, seed)
            at = torch.from_numpy(idx).to(x.device)
        packed = self._pack_kept(CodecInput(x[at].cpu()), idx, n, seed)
        return packed, SparseVector.of_arrays(n, self._kept(packed, k, seed), idx)

    def _kept(self, packed: dict[str, np.ndarray], k: int, seed: int) -> np.ndarray:
        """The kept values, decoded by the value codec (a fresh float32 array)."""
        kept = self.values._unpack({name: packed[name] for name in self.values.layout(k)}, k, seed)
        return np.ascontiguousarray(kept, dtype=np.float32)

    def _unpack_indexed(self, packed: dict[str, np.ndarray], numel: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted int64 indices, their float32 values)."""
        k = self.k(numel)
        if self.kind == "topk":
            idx = ef_decode(packed["ihi"], packed["ilo"], numel, k)
        else:
            idx = randk_indices(numel, k, seed)
        return idx, self._kept(packed, k, seed)

    def decompress_sparse(self, packed: dict[str, np.ndarray], numel: int, seed: int = 0) -> SparseVector:
        numel = check_numel(numel)
        idx, kept = self._unpack_indexed(check_layout(packed, self.layout(numel)), numel, seed)
        return SparseVector.of_arrays(numel, kept, idx)

    def _unpack(self, packed: dict[str, np.ndarray], numel: int, seed: int) -> np.ndarray:
        idx, kept = self._unpack_indexed(packed, numel, seed)
        out = np.zeros(numel, np.float32)
        out[idx] = kept
        return out
