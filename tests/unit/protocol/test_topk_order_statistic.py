"""The k-th largest magnitude top-k cuts at is np.partition's, whether it is found among the few
entries below a sampled bound or in the partition of all, from one array or from the pieces a
chunked scan leaves: ties, NaN and skewed data included."""

from __future__ import annotations

import numpy as np
import pytest

from protocol.codecs_sparse import TOPK_SAMPLED_MIN, _order_statistic, _pick, candidates_at_or_above


def data(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return np.abs(rng.standard_normal(n)).astype(np.float32)
    if kind == "ties":  # few distinct values: the cut falls inside a run of equal ones
        return rng.integers(0, 5, n).astype(np.float32)
    if kind == "nan":
        a = np.abs(rng.standard_normal(n)).astype(np.float32)
        a[rng.integers(0, n, n // 3)] = np.nan
        return a
    if kind == "sorted":  # a strided sample of sorted data is a fair one
        return np.sort(np.abs(rng.standard_normal(n)).astype(np.float32))
    if kind == "skewed":  # every sampled entry is far below the rest: the bound holds too few, fall back
        a = (1.0 + np.abs(rng.standard_normal(n))).astype(np.float32)
        sampled = a[:: n // 4096]
        sampled[:] = np.linspace(1e-6, 1e-3, sampled.size, dtype=np.float32)
        return a
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["gaussian", "ties", "nan", "sorted", "skewed"])
@pytest.mark.parametrize("n", [TOPK_SAMPLED_MIN, 121_736, 400_003])
def test_order_statistic_is_partitions(kind: str, n: int) -> None:
    a = data(kind, n, seed=n)
    pieces = np.array_split(a, [n // 7, n // 7 + 1, n // 2])  # uneven, one of a single entry
    for m in sorted({0, 1, n // 100, n // 14, n // 4, n // 2, n - 1}):
        want = np.partition(a, m)[m]
        for got in (_order_statistic([a], m), _order_statistic(pieces, m)):
            assert (np.isnan(want) and np.isnan(got)) or want == got, (kind, n, m)


@pytest.mark.parametrize("kind", ["gaussian", "ties", "nan"])
def test_select_keeps_the_positions_above_the_cut_and_the_first_ties(kind: str) -> None:
    a = data(kind, 200_000, seed=7)
    signed = np.where(np.arange(a.size) % 3 == 0, -a, a)  # selection is by magnitude
    for k in (185_000, 199_999, 150_000, 20_000):
        kth = np.partition(a, a.size - k)[a.size - k]
        if np.isnan(kth):
            want = np.flatnonzero(np.isnan(a))[:k]
        else:
            keep = ~(a <= kth)
            keep[np.flatnonzero(a == kth)[: k - int(np.count_nonzero(keep))]] = True
            want = np.flatnonzero(keep)
        above = 0 if np.isnan(kth) else int(np.count_nonzero(~(a <= kth)))
        np.testing.assert_array_equal(_pick(candidates_at_or_above(signed, np.float32(0.0)), k, kth, above), want)
