"""Stochastic rounding to bfloat16: each result one of the two neighbours, up with the probability
the dropped bits give (so unbiased), exact values, signs, zeros, subnormals, inf and NaN kept, the
same bits from the same generator, and pieces that change none of it."""

from __future__ import annotations

import math

import pytest
import torch

from async_opt import stochastic_round as sr
from async_opt import stochastic_round_bf16

F32_MAX_WORD = 0x7F7FFFFF
BF16_MAX = float(torch.finfo(torch.bfloat16).max)


def words(*bits: int) -> torch.Tensor:
    """float32 values from their bit patterns (given as unsigned 32-bit numbers)."""
    return torch.tensor([b - (1 << 32) if b >= 1 << 31 else b for b in bits], dtype=torch.int32).view(torch.float32)


def rounded(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=torch.bfloat16)
    return stochastic_round_bf16(x, out, torch.Generator().manual_seed(seed))


def bits16(x: torch.Tensor) -> torch.Tensor:
    """bfloat16 patterns as int64 in [0, 2^16)."""
    return x.view(torch.int16).to(torch.int64) & 0xFFFF


def bits32(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def assert_neighbours(x: torch.Tensor, got: torch.Tensor) -> None:
    """Every non-NaN result is the pattern x truncates to, or the next one away from zero."""
    keep = ~torch.isnan(x)
    low = bits32(x[keep]) >> 16
    step = bits16(got[keep]) - low
    assert bool(((step == 0) | (step == 1)).all())
    assert bool(((bits16(got[keep]) >> 15) == (bits32(x[keep]) >> 31)).all())  # the sign stays
    assert bool(torch.isnan(got[~keep]).all())


def spread(n: int, seed: int) -> torch.Tensor:
    """float32 values of every exponent and sign, subnormals included."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-(1 << 31), 1 << 31, (n,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)


def test_every_result_is_a_neighbour_and_finite_values_stay_finite() -> None:
    x = spread(1 << 18, seed=1)
    got = rounded(x)
    assert_neighbours(x, got)
    safe = torch.isfinite(x) & (x.abs() <= BF16_MAX)
    assert bool(torch.isfinite(got[safe]).all())  # only past bfloat16's largest may a value round to inf


@pytest.mark.parametrize("low_bits", [1, 0x1000, 0x5555, 0x8000, 0xFFFF])
def test_rounds_up_with_the_probability_of_the_dropped_bits(low_bits: int) -> None:
    """The count of roundings up of x, between neighbours a and b, is Binomial(R, (x − a)/(b − a)):
    within five standard deviations; so the mean of the roundings is x (unbiased)."""
    repeats = 1 << 14
    lows = [0x3F800000, 0x00000000, 0x00400000, 0x007F0000, 0x7F7E0000, 0x80010000, 0xC2280000, 0x9A5B0000]
    x = words(*(w | low_bits for w in lows)).repeat_interleave(repeats)  # normals, subnormals, both signs
    got = rounded(x, seed=low_bits)
    ups = (bits16(got) - (bits32(x) >> 16)).view(len(lows), repeats).sum(dim=1)
    p = low_bits / 65536
    sd = math.sqrt(repeats * p * (1 - p))
    assert bool(((ups - repeats * p).abs() <= 5 * sd + 1).all()), ups
    spacing = (words(*(w + 0x10000 for w in lows)).double() - words(*lows).double()).abs()
    mean = got.to(torch.float64).view(len(lows), repeats).mean(dim=1)
    x64 = x.to(torch.float64).view(len(lows), repeats)[:, 0]
    assert bool(((mean - x64).abs() <= (5 * math.sqrt(p * (1 - p) / repeats) + 1 / repeats) * spacing).all())


def test_exact_values_zeros_and_infinities_stay() -> None:
    g = torch.Generator().manual_seed(3)
    exact = spread(1 << 16, seed=4).to(torch.bfloat16)
    exact = exact[~torch.isnan(exact)].to(torch.float32)
    edges = torch.tensor([0.0, -0.0, math.inf, -math.inf, BF16_MAX, -BF16_MAX, 2.0 ** -133, -(2.0 ** -133),
                          2.0 ** -126, 1.0, -1.0])
    x = torch.cat([exact, edges, edges])[torch.randperm(exact.numel() + 2 * edges.numel(), generator=g)]
    assert torch.equal(rounded(x).view(torch.int16), x.to(torch.bfloat16).view(torch.int16))
    assert torch.equal(bits16(rounded(words(0x80000000))), torch.tensor([0x8000]))  # -0 keeps its sign


def test_below_the_smallest_subnormal_rounds_to_zero_or_it() -> None:
    tiny = 2.0 ** -133  # bfloat16's smallest subnormal
    x = torch.full((1 << 16,), tiny / 4)
    got = rounded(torch.cat([x, -x]), seed=5).to(torch.float64)
    assert set(got.unique().tolist()) <= {0.0, tiny, -tiny}
    assert got[:x.numel()].mean().item() == pytest.approx(tiny / 4, rel=0.05)
    assert got[x.numel():].mean().item() == pytest.approx(-tiny / 4, rel=0.05)


@pytest.mark.parametrize("masks", ["where a NaN may be", "every piece"])
def test_nan_stays_nan_and_near_the_largest_may_round_to_inf(masks: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if masks == "every piece":
        monkeypatch.setattr(sr, "_may_hold_nan", lambda piece: True)
    nans = words(0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001, 0x7FC00000, 0x7F80FFFF)
    assert bool(torch.isnan(rounded(nans.repeat(1000))).all())
    top = words(F32_MAX_WORD, 0xFF7FFFFF).repeat_interleave(4096)
    got = rounded(top, seed=6)
    assert set(got[:4096].tolist()) <= {BF16_MAX, math.inf} and math.inf in got[:4096].tolist()
    assert set(got[4096:].tolist()) <= {-BF16_MAX, -math.inf}


def test_the_same_generator_state_gives_the_same_bits() -> None:
    x = spread(100_003, seed=7)
    assert torch.equal(rounded(x, seed=8).view(torch.int16), rounded(x, seed=8).view(torch.int16))
    assert not torch.equal(rounded(x, seed=8).view(torch.int16), rounded(x, seed=9).view(torch.int16))
    g = torch.Generator().manual_seed(10)
    out = torch.empty(x.numel(), dtype=torch.bfloat16)
    first = stochastic_round_bf16(x, out, g).clone()
    assert not torch.equal(stochastic_round_bf16(x, out, g), first)  # the generator moved on


@pytest.mark.parametrize("masks", ["where a NaN may be", "every piece"])
@pytest.mark.parametrize("piece", [1, 5, 8, 13])
def test_pieces_edges(piece: int, masks: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of any length, a NaN in some and none in others, and entries on their edges; masking
    NaNs in every piece, as on a device, changes nothing."""
    monkeypatch.setattr(sr, "piece_for", lambda values: piece)
    if masks == "every piece":
        monkeypatch.setattr(sr, "_may_hold_nan", lambda piece: True)
    x = spread(4 * piece + 3, seed=piece)
    x[piece - 1], x[2 * piece] = math.nan, 1.0  # the last entry of one piece, the first of another
    got = rounded(x)
    assert_neighbours(x, got)
    assert got[2 * piece].item() == 1.0
    halfway = rounded(words(0x3F808000).repeat(4096 * piece)).to(torch.float64)  # 1 + 2^-8: 1 or 1 + 2^-7
    assert halfway.mean().item() == pytest.approx(1 + 2 ** -8, abs=5 * 2 ** -7 * 0.5 / math.sqrt(4096 * piece))


def test_shapes_strides_and_bfloat16_sources() -> None:
    x = spread(6 * 7, seed=11).view(6, 7)
    x = torch.where(torch.isnan(x), torch.zeros(()), x)
    got = torch.empty(7, 6, dtype=torch.bfloat16)
    stochastic_round_bf16(x.t(), got, torch.Generator().manual_seed(0))  # a transposed view is copied first
    assert_neighbours(x.t().reshape(-1), got.view(-1))
    b = x.to(torch.bfloat16)
    assert torch.equal(stochastic_round_bf16(b, torch.empty(6, 7, dtype=torch.bfloat16), torch.Generator()), b)
    assert stochastic_round_bf16(torch.zeros(0), torch.empty(0, dtype=torch.bfloat16), torch.Generator()).numel() == 0


def test_refuses_what_it_cannot_write() -> None:
    g = torch.Generator()
    with pytest.raises(ValueError, match="bfloat16"):
        stochastic_round_bf16(torch.zeros(3), torch.empty(3), g)
    with pytest.raises(ValueError, match="entries"):
        stochastic_round_bf16(torch.zeros(3), torch.empty(4, dtype=torch.bfloat16), g)
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        stochastic_round_bf16(torch.zeros(3, dtype=torch.float64), torch.empty(3, dtype=torch.bfloat16), g)
    with pytest.raises(ValueError, match="contiguous"):
        stochastic_round_bf16(torch.zeros(4), torch.empty(2, 4, dtype=torch.bfloat16)[:, :2], g)
