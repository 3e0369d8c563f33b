"""Coordinate-wise median, trimmed mean, probe audit: exact values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from async_opt import ProbeAudit, coordinate_median, probe_audit, trimmed_mean


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def test_median_odd_count() -> None:
    out = coordinate_median([t(1, 10), t(5, -2), t(3, 0)])
    assert torch.equal(out, t(3, 0))


def test_median_even_count_is_mean_of_middle_two() -> None:
    ups = [t(1, 10), t(5, -2), t(3, 0), t(4, 100)]
    # column 0 sorted 1 3 4 5 -> 3.5; column 1 sorted -2 0 10 100 -> 5
    assert torch.equal(coordinate_median(ups), t(3.5, 5))
    # torch.median would pick the lower middle value instead
    assert not torch.equal(torch.stack(ups).median(dim=0).values, t(3.5, 5))


def test_median_ties_and_single() -> None:
    assert torch.equal(coordinate_median([t(2, 2), t(2, 7), t(2, 7), t(9, 7)]), t(2, 7))
    assert torch.equal(coordinate_median([t(1, 2)]), t(1, 2))
    assert torch.equal(coordinate_median([t(1, 2), t(3, 2)]), t(2, 2))


def test_median_order_invariant_and_shapes() -> None:
    g = torch.Generator().manual_seed(0)
    ups = [torch.randn(3, 4, generator=g) for _ in range(6)]
    a = coordinate_median(ups)
    b = coordinate_median(ups[::-1])
    assert a.shape == (3, 4) and torch.equal(a, b)


def test_median_validation() -> None:
    with pytest.raises(ValueError, match="at least one"):
        coordinate_median([])
    with pytest.raises(ValueError, match="shape"):
        coordinate_median([t(1, 2), t(1, 2, 3)])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=3, max_size=3), min_size=1, max_size=9))
def test_median_matches_numpy(rows: list[list[float]]) -> None:
    ups = [torch.tensor(r, dtype=torch.float64) for r in rows]
    expected = np.median(np.array(rows), axis=0)
    assert np.allclose(coordinate_median(ups).numpy(), expected, rtol=1e-12, atol=0)


def test_trimmed_mean_exact() -> None:
    ups = [t(1), t(2), t(3), t(100), t(-50)]  # sorted -50 1 2 3 100
    assert torch.equal(trimmed_mean(ups, 1), t(2))
    assert torch.equal(trimmed_mean(ups, 0.2), t(2))  # floor(0.2 * 5) = 1
    assert torch.equal(trimmed_mean(ups, 0.1), t(56 / 5))  # floor(0.5) = 0: plain mean
    assert torch.equal(trimmed_mean(ups, 0), t(56 / 5))
    assert torch.equal(trimmed_mean(ups, 2), t(2))


def test_trimmed_mean_per_coordinate() -> None:
    ups = [t(0, 9), t(1, 1), t(2, 2), t(3, 0)]
    # col 0: drop 0 and 3 -> mean(1, 2) = 1.5; col 1: drop 0 and 9 -> mean(1, 2) = 1.5
    assert torch.equal(trimmed_mean(ups, 1), t(1.5, 1.5))


@pytest.mark.parametrize("trim", [3, 0.5, -1, 0.7, True, "1"])
def test_trimmed_mean_validation(trim: object) -> None:
    with pytest.raises(ValueError):
        trimmed_mean([t(1), t(2), t(3), t(4), t(5)], trim)  # type: ignore[arg-type]


def test_trimmed_mean_empty() -> None:
    with pytest.raises(ValueError):
        trimmed_mean([], 0)


def sq(x: torch.Tensor) -> float:
    return float((x**2).sum())


def test_probe_audit_exact() -> None:
    before, after = t(1, 0), t(2, 0)  # loss 1 -> 4
    assert probe_audit(sq, before, after, 2.0) == (False, 3.0)
    assert probe_audit(sq, before, after, 3.0) == (True, 3.0)
    assert probe_audit(sq, after, before, 0.0) == (True, -3.0)
    assert probe_audit(sq, before, t(math.inf, 0), 1e30) == (False, math.inf)
    assert probe_audit(sq, before, t(math.nan, 0), 1e30) == (False, math.inf)
    with pytest.raises(ValueError):
        probe_audit(sq, before, after, -1.0)


def test_probe_audit_strikes() -> None:
    audit = ProbeAudit(sq, max_increase=0.5, max_strikes=2)
    good, bad = (t(1, 0), t(0.5, 0)), (t(1, 0), t(2, 0))
    assert audit.audit("a", *bad) == (False, 3.0)
    assert not audit.suspect("a")
    assert audit.audit("a", *bad)[0] is False
    assert audit.suspect("a") and audit.strikes["a"] == 2
    assert audit.audit("a", *good)[0] is True
    assert not audit.suspect("a") and audit.strikes["a"] == 1
    assert audit.audit("b", *good)[0] is True and audit.strikes["b"] == 0  # never below zero
    audit.forget("a")
    assert "a" not in audit.strikes


def test_probe_audit_relative() -> None:
    audit = ProbeAudit(sq, max_increase=0.25, relative=True)
    before = t(1, 1)  # loss 2; bound 0.5
    assert audit.check(before, t(1.5, 0.5)) == (True, 0.5)  # loss 2.5
    assert audit.check(before, t(1.5, 1.0))[0] is False  # loss 3.25
