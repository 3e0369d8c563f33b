"""Elias-Fano codes of sorted indices (Elias 1974, Fano 1971): how top-k sends where its values go.

k strictly increasing indices below n cost 2 + floor(log2(n/k)) bits each: the high part of each
index as a unary gap in one bit vector, its `low` low bits packed in a second. Both are written and
read a piece at a time, so no temporary grows with k beyond the k indices themselves.

The low bits of eight consecutive indices fill exactly `low` bytes, so for `low` up to 8 (top-k of
at least 1/256 of the entries) they are packed and unpacked as one 64-bit word per eight indices;
wider low parts go bit by bit. Both ways write the same bytes.
"""

from __future__ import annotations

import numpy as np

from .errors import CodecError

__all__ = ["ef_encode", "ef_decode", "ef_nbytes"]

_EF_ROWS = 1 << 20  # indices an Elias-Fano piece codes or decodes at a time (a multiple of 8)
_EF_BITS = 1 << 22  # high bits an Elias-Fano decode scans at a time
_WORD_LOW_MAX = 8  # eight indices' low bits fit one uint64 up to this many bits each


def _pack_low(part: np.ndarray, low: int) -> np.ndarray:
    """The low `low` bits of each index, little-endian bit order, ceil(len * low / 8) bytes."""
    rows = part.size
    if low > _WORD_LOW_MAX:
        matrix = np.empty((rows, low), np.uint8)
        for b in range(low):
            matrix[:, b] = (part >> b) & 1
        return np.packbits(matrix.reshape(-1), bitorder="little")
    groups = -(-rows // 8)
    lows = np.zeros((groups, 8), np.uint64)
    np.bitwise_and(part, (1 << low) - 1, out=lows.reshape(-1)[:rows], casting="unsafe")
    word = lows[:, 0].copy()
    for i in range(1, 8):
        word |= lows[:, i] << np.uint64(i * low)
    return word.view(np.uint8).reshape(groups, 8)[:, :low].reshape(-1)[:-(-(rows * low) // 8)]


def _unpack_low(packed: np.ndarray, rows: int, low: int) -> np.ndarray:
    """Inverse of `_pack_low`: `rows` int64 values below 2**low."""
    if low > _WORD_LOW_MAX:
        matrix = np.unpackbits(packed, bitorder="little")[:rows * low].reshape(rows, low)
        out = np.zeros(rows, np.int64)
        for b in range(low):
            out |= matrix[:, b].astype(np.int64) << b
        return out
    groups = -(-rows // 8)
    words = np.zeros((groups, 8), np.uint8)
    padded = np.zeros(groups * low, np.uint8)
    padded[:packed.size] = packed
    words[:, :low] = padded.reshape(groups, low)
    shifts = np.arange(0, 8 * low, low, dtype=np.uint64)
    lows = (words.view(np.uint64) >> shifts) & np.uint64((1 << low) - 1)
    return lows.reshape(-1)[:rows].view(np.int64)


def _ef_low_bits(n: int, k: int) -> int:
    return max(0, (n // k).bit_length() - 1) if k else 0


def ef_nbytes(n: int, k: int) -> tuple[int, int]:
    """(high-part bytes, low-part bytes) of the Elias-Fano code of k sorted indices < n."""
    if k == 0:
        return 0, 0
    low = _ef_low_bits(n, k)
    return -(-(k + ((n - 1) >> low) + 1) // 8), -(-(k * low) // 8)


def ef_encode(idx: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Elias-Fano code of strictly increasing int64 indices in [0, n).

    Written `_EF_ROWS` indices at a time (a multiple of 8, so each piece's low bits end on a byte):
    at a dense top-k (40% of a large model) whole-array temporaries of int64 were several copies of
    the model."""
    k = idx.size
    if k == 0:
        return np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    low = _ef_low_bits(n, k)
    bits = np.zeros(k + ((n - 1) >> low) + 1, np.uint8)
    lo = np.empty(-(-(k * low) // 8), np.uint8)
    for start in range(0, k, _EF_ROWS):
        part = idx[start:start + _EF_ROWS]
        bits[(part >> low) + np.arange(start, start + part.size)] = 1
        if low:
            packed = _pack_low(part, low)
            lo[start * low // 8:start * low // 8 + packed.size] = packed
    return np.packbits(bits, bitorder="little"), lo


def ef_decode(hi: np.ndarray, lo: np.ndarray, n: int, k: int) -> np.ndarray:
    """Inverse of `ef_encode`; CodecError unless the code is exactly one it can produce.

    Read a piece of the high bits at a time into one int64 array of k: no whole-code temporaries
    beyond the unpacked high bits (a byte per bit, about 2k bytes)."""
    if k == 0:
        return np.zeros(0, np.int64)
    low = _ef_low_bits(n, k)
    nbits = k + ((n - 1) >> low) + 1
    bits = np.unpackbits(hi, bitorder="little")
    if bits[nbits:].any():
        raise CodecError("index code has stray padding bits")
    if lo.size * 8 < k * low or np.unpackbits(lo[(k * low) // 8:], bitorder="little")[(k * low) % 8:].any():
        raise CodecError("index code has stray padding bits")
    flags = bits[:nbits].view(bool)  # 0/1 bytes; numpy finds bools much faster than uint8 (docs/benchmarks/peer.md#finiteness-checks-and-index-decoding)
    if (held := int(np.count_nonzero(flags))) != k:
        raise CodecError(f"index code holds {held} indices, expected {k}")
    idx = np.empty(k, np.int64)
    found = 0
    for start in range(0, nbits, _EF_BITS):
        pos = np.flatnonzero(flags[start:start + _EF_BITS])
        # the j-th set bit sits at (index_j >> low) + j: written in place, no temporaries
        high = idx[found:found + pos.size]
        np.subtract(pos, np.arange(found - start, found - start + pos.size), out=high)
        np.left_shift(high, low, out=high)
        found += pos.size
    for first in range(0, k, _EF_ROWS):
        rows = min(_EF_ROWS, k - first)
        part = idx[first:first + rows]
        if low:
            part |= _unpack_low(lo[first * low // 8:-(-((first + rows) * low) // 8)], rows, low)
        # strictly increasing within this piece and from the one before
        if (rows > 1 and not np.greater(part[1:], part[:-1]).all()) or (first and part[0] <= idx[first - 1]):
            raise CodecError("indices are not strictly increasing within [0, numel)")
    if idx[-1] >= n:
        raise CodecError("indices are not strictly increasing within [0, numel)")
    return idx
