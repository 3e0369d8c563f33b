"""Clipping, adaptive radius, the mixing step, weight prediction: exact values."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from async_opt import (AdaptiveRadius, clip, consensus_distance, mix_delta, mix_diffs, mix_step, safe_distances,
                       safe_norm)


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


# ---------------------------------------------------------------- clip


def test_clip_exact() -> None:
    assert torch.equal(clip(t(3, 4), 10.0), t(3, 4))
    assert torch.equal(clip(t(3, 4), 5.0), t(3, 4))  # on the boundary: unchanged
    assert torch.allclose(clip(t(3, 4), 1.0), t(0.6, 0.8), rtol=0, atol=1e-15)
    assert torch.allclose(clip(t(-6, 8), 5.0), t(-3, 4), rtol=0, atol=1e-15)
    # the norm is over the whole tensor, whatever its shape
    assert torch.allclose(clip(torch.tensor([[3.0], [4.0]]), 2.5), torch.tensor([[1.5], [2.0]]))


def test_clip_zero_vector_and_zero_radius() -> None:
    assert torch.equal(clip(t(0, 0, 0), 1.0), t(0, 0, 0))
    assert torch.equal(clip(t(0, 0, 0), 0.0), t(0, 0, 0))
    assert torch.equal(clip(t(3, 4), 0.0), t(0, 0))


def test_clip_no_radius() -> None:
    v = t(3e30, -4e30)
    for rho in (None, math.inf):
        out = clip(v, rho)
        assert torch.equal(out, v) and out is not v


def test_clip_non_finite_input() -> None:
    assert torch.equal(clip(t(math.inf, 1), 1.0), t(0, 0))
    assert torch.equal(clip(t(math.nan, 1), 1.0), t(0, 0))
    assert torch.isinf(clip(t(math.inf, 1), None)).any()  # no clipping: passes through


def test_clip_bad_radius() -> None:
    for rho in (-1.0, math.nan):
        with pytest.raises(ValueError, match="rho"):
            clip(t(1, 1), rho)


@settings(max_examples=50, deadline=None)
@given(
    v=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=20),
    rho=st.floats(0, 1e3, allow_nan=False),
)
def test_clip_norm_bound_and_direction(v: list[float], rho: float) -> None:
    x = torch.tensor(v, dtype=torch.float64)
    out = clip(x, rho)
    n_in, n_out = float(torch.linalg.vector_norm(x)), float(torch.linalg.vector_norm(out))
    assert n_out <= rho * (1 + 1e-12) + 1e-150  # below ~1e-154 the squares in the norm go subnormal
    assert n_out <= n_in * (1 + 1e-12)
    if n_in <= rho:
        assert torch.equal(out, x)
    elif n_in > 0:
        # same direction: out is a non-negative multiple of x
        assert float((out * x).sum()) >= 0
        assert torch.allclose(out * n_in, x * n_out, rtol=1e-9, atol=1e-9 * n_in * max(n_out, 1))


# ---------------------------------------------------------------- adaptive radius


def test_adaptive_radius_quantile_and_window() -> None:
    r = AdaptiveRadius(window=4, q=0.5, multiplier=1.0, min_samples=3)
    assert r.radius == math.inf and not r.warm
    r.observe(1.0)
    r.observe(2.0)
    assert r.radius == math.inf  # still cold
    r.observe(3.0)
    assert r.warm and r.radius == 2.0
    r.observe(10.0)  # [1, 2, 3, 10] -> median 2.5 (linear interpolation)
    assert r.radius == 2.5
    r.observe(4.0)  # 1 leaves the window: [2, 3, 4, 10] -> 3.5
    assert r.radius == 3.5
    r.observe(math.nan)
    r.observe(math.inf)
    r.observe(-1.0)
    assert r.radius == 3.5  # ignored


def test_adaptive_radius_quantile_ends_and_multiplier() -> None:
    for q, mult, expected in [(0.0, 1.0, 1.0), (1.0, 1.0, 9.0), (0.25, 2.0, 6.0), (0.5, 0.5, 2.5)]:
        r = AdaptiveRadius(window=8, q=q, multiplier=mult, min_samples=1)
        for d in (9.0, 1.0, 5.0, 3.0, 7.0):  # sorted 1 3 5 7 9
            r.observe(d)
        assert r.radius == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize(
    "kwargs",
    [dict(window=0), dict(q=1.5), dict(q=-0.1), dict(multiplier=0.0), dict(min_samples=0),
     dict(window=4, min_samples=5)],
)
def test_adaptive_radius_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        AdaptiveRadius(**kwargs)


# ---------------------------------------------------------------- mix_step


def test_mix_step_exact_without_clipping() -> None:
    x, xh = t(0, 0), t(1, 1)
    out = mix_step(x, xh, [(t(3, 1), 0.5), (t(1, 5), 0.25)], None)
    # diffs [2, 0] and [0, 4]; Σ λ d = [1, 1]; / |J| = 2
    assert torch.equal(out, t(0.5, 0.5))
    assert torch.equal(x, t(0, 0))  # not modified in place


def test_mix_step_exact_with_clipping() -> None:
    out = mix_step(t(0, 0), t(1, 1), [(t(3, 1), 0.5), (t(1, 5), 0.25)], 1.0)
    # clipped diffs [1, 0] and [0, 1]; Σ λ d = [0.5, 0.25]; / 2
    assert torch.equal(out, t(0.25, 0.125))


def test_mix_step_centres_on_public_copy_not_x() -> None:
    # x differs from x_hat_self: the pull is x_hat_j - x_hat_self, added to x
    out = mix_step(t(10, 10), t(1, 1), [(t(3, 1), 1.0)], None)
    assert torch.equal(out, t(12, 10))


def test_mix_step_empty_neighbours_is_a_copy() -> None:
    x = t(1, 2)
    out = mix_step(x, t(0, 0), [], 1.0)
    assert torch.equal(out, x) and out is not x


def test_mix_step_zero_rate_still_counts_in_J() -> None:
    out = mix_step(t(0, 0), t(1, 1), [(t(3, 1), 0.5), (t(9, 9), 0.0)], None)
    assert torch.equal(out, t(0.5, 0))
    out = mix_step(t(0, 0), t(1, 1), [(t(9, 9), 0.0)], None)
    assert torch.equal(out, t(0, 0))


def test_mix_step_validation() -> None:
    with pytest.raises(ValueError, match="rate"):
        mix_step(t(0, 0), t(0, 0), [(t(1, 1), 1.5)], None)
    with pytest.raises(ValueError, match="rate"):
        mix_step(t(0, 0), t(0, 0), [(t(1, 1), -0.1)], None)
    with pytest.raises(ValueError, match="neighbour 1"):
        mix_step(t(0, 0), t(0, 0), [(t(1, 1), 0.1), (t(1, 1, 1), 0.1)], None)
    with pytest.raises(ValueError, match="x shape"):
        mix_step(t(0, 0, 0), t(0, 0), [], None)


def test_mix_step_clipping_bounds_a_huge_neighbour() -> None:
    out = mix_step(t(0, 0), t(0, 0), [(t(1e30, 0), 1.0), (t(math.inf, 0), 1.0)], 2.0)
    assert torch.allclose(out, t(1, 0), rtol=1e-15, atol=0)  # (clip -> [2, 0]) + (non-finite -> 0), / 2


def test_symmetric_pair_mix_keeps_the_sum() -> None:
    g = torch.Generator().manual_seed(3)
    xi, xj = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    lam = 0.3
    ni = mix_step(xi, xi, [(xj, lam)], None)
    nj = mix_step(xj, xj, [(xi, lam)], None)
    assert torch.allclose(ni + nj, xi + xj, rtol=0, atol=1e-14)


# ---------------------------------------------------------------- prediction, consensus


def test_consensus_distance_exact() -> None:
    assert consensus_distance([t(0, 0), t(2, 0)]) == 1.0
    assert consensus_distance([t(1, 1)] * 3) == 0.0
    assert consensus_distance([t(0, 0), t(0, 0), t(3, 0)]) == pytest.approx((1 + 1 + 4) / 3, abs=1e-15)
    with pytest.raises(ValueError):
        consensus_distance([])


def test_mix_delta_is_what_mix_diffs_adds_and_reuses_the_first_difference():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(50, generator=g)
    diffs = [(torch.randn(50, generator=g) * s, lam, 0.0) for s, lam in ((1.0, 0.5), (10.0, 0.25), (0.1, 0.0))]
    diffs = [(d, lam, float(d.norm())) for d, lam, _ in diffs]
    for rho in (None, 2.0):
        expected = mix_diffs(x, diffs, rho) - x
        copies = [(d.clone(), lam, n) for d, lam, n in diffs]
        delta = mix_delta(copies, rho)
        assert delta is copies[0][0]  # built in place: no new parameter-sized buffer
        assert torch.allclose(delta, expected, atol=1e-6)
    assert mix_delta([(torch.ones(3), 0.0, 1.7)], None) is None  # nothing moves x
    assert mix_delta([(torch.full((3,), math.inf), 1.0, math.inf)], 1.0) is None  # no usable direction


@pytest.mark.parametrize("n", [5, 1 << 17, (1 << 18) + 3])
def test_the_distances_are_the_norms_of_the_differences_without_building_them(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    ref, a, b = (torch.randn(n, generator=g) for _ in range(3))
    want = [float(torch.linalg.vector_norm((v - ref).double())) for v in (a, b)]
    assert safe_distances([a, b], ref) == pytest.approx(want, rel=1e-6)
    b[n // 2] = float("nan")  # one vector's NaN leaves the other's distance alone
    got = safe_distances([a, b], ref)
    assert got[0] == pytest.approx(want[0], rel=1e-6) and math.isnan(got[1])
    a.fill_(2e38)
    ref.fill_(-1e38)  # every difference finite, their norm past float32's range
    assert safe_distances([a], ref)[0] == pytest.approx(3e38 * math.sqrt(n), rel=1e-6)
    with pytest.raises(ValueError, match="shapes"):
        safe_distances([a, b[1:]], ref)


@pytest.mark.parametrize("n", [5, (1 << 17) + 3])
def test_a_half_width_norm_past_float32s_range_is_finite_and_nan_stays_nan(n: int) -> None:
    """A bfloat16 vector whose float32 sum of squares overflows is summed again in float64 (a piece
    at a time past a `PIECE`); a NaN or ±inf entry still gives a non-finite norm."""
    x = torch.full((n,), 2e38).to(torch.bfloat16)
    assert safe_norm(x) == pytest.approx(float(x[0]) * math.sqrt(n), rel=1e-12)
    for bad in (float("nan"), float("inf")):
        y = x.clone()
        y[n // 2] = bad
        assert not math.isfinite(safe_norm(y))
