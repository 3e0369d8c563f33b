"""Elias-Fano codes written and read a piece at a time are the whole-array code, bit for bit, and
a decode still refuses indices that go back across a piece boundary."""

from __future__ import annotations

import numpy as np
import pytest

from protocol import elias_fano
from protocol.elias_fano import _ef_low_bits, ef_decode, ef_encode
from protocol.errors import CodecError


def whole_array_code(idx: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The code in one piece: high parts as unary gaps, low bits row by row."""
    k = idx.size
    low = _ef_low_bits(n, k)
    bits = np.zeros(k + ((n - 1) >> low) + 1, np.uint8)
    bits[(idx >> low) + np.arange(k)] = 1
    matrix = np.array([[(i >> b) & 1 for b in range(low)] for i in idx.tolist()], np.uint8).reshape(k, low)
    return np.packbits(bits, bitorder="little"), np.packbits(matrix.reshape(-1), bitorder="little")


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elias_fano, "_EF_ROWS", 16)
    monkeypatch.setattr(elias_fano, "_EF_BITS", 23)  # pieces that end inside a byte


@pytest.mark.parametrize("n,k", [(1000, 1), (1000, 17), (1000, 400), (4096, 4000), (100_003, 1_000), (64, 64)])
def test_pieces_give_the_whole_array_code(small_pieces: None, n: int, k: int) -> None:
    idx = np.sort(np.random.default_rng(n + k).choice(n, k, replace=False)).astype(np.int64)
    hi, lo = ef_encode(idx, n)
    want_hi, want_lo = whole_array_code(idx, n)
    np.testing.assert_array_equal(hi, want_hi)
    np.testing.assert_array_equal(lo, want_lo)
    np.testing.assert_array_equal(ef_decode(hi, lo, n, k), idx)


def test_a_step_back_across_a_piece_boundary_is_refused(small_pieces: None) -> None:
    """Rows 15 and 16 (the last of the first piece of 16 and the first of the second) share a high
    part, and row 16's low bits are below row 15's: every piece is increasing, the whole is not."""
    n, k = 4096, 64
    low = _ef_low_bits(n, k)
    idx = np.arange(0, 64 * 64, 64, dtype=np.int64)  # row i: high part i, low bits 0
    idx[15] |= (1 << low) - 1
    hi, lo = whole_array_code(idx, n)
    np.testing.assert_array_equal(ef_decode(hi, lo, n, k), idx)
    bits = np.unpackbits(hi, bitorder="little")
    bits[16 + 16], bits[15 + 16] = 0, 1  # row 16's set bit one lower: its high part becomes 15
    with pytest.raises(CodecError, match="strictly increasing"):
        ef_decode(np.packbits(bits, bitorder="little"), lo, n, k)


@pytest.mark.parametrize("low", list(range(1, 13)))
@pytest.mark.parametrize("rows", [1, 7, 8, 9, 63, 1000])
def test_low_bits_packed_by_words_are_the_bit_by_bit_packing(low: int, rows: int) -> None:
    """Eight indices' low bits as one 64-bit word (up to 8 bits each) write the bytes the
    bit-by-bit packing writes, padding included, and read back the low bits alone."""
    part = np.random.default_rng(low * 1000 + rows).integers(0, 1 << 40, rows).astype(np.int64)
    matrix = np.array([[(i >> b) & 1 for b in range(low)] for i in part.tolist()], np.uint8)
    want = np.packbits(matrix.reshape(-1), bitorder="little")
    packed = elias_fano._pack_low(part, low)
    np.testing.assert_array_equal(packed, want)
    np.testing.assert_array_equal(elias_fano._unpack_low(packed, rows, low), part & ((1 << low) - 1))
