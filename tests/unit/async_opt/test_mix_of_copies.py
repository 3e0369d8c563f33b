"""`mix_delta_of_copies` builds the consensus step a cache-sized piece at a time from the copies
themselves: the same bits as `mix_delta` on parameter-sized differences, without them."""

from __future__ import annotations

import math

import pytest
import torch

from async_opt import mix_delta, mix_delta_of_copies, safe_distances
from async_opt.mixing import PIECE


@pytest.mark.parametrize("n", [1000, 3 * PIECE + 5])
@pytest.mark.parametrize("rho, power", [(None, 1.0), (0.5, 1.0), (0.5, 2.0)])
def test_the_same_bits_as_mix_delta_on_the_differences(n: int, rho: float | None, power: float):
    g = torch.Generator().manual_seed(n)
    public = torch.randn(n, generator=g)
    xs = [public + torch.randn(n, generator=g) * s for s in (1e-3, 0.1, 3.0)]
    lams = [0.3, 0.25, 0.0]  # a copy weighed 0 moves nothing
    distances = safe_distances(xs, public)
    ours = mix_delta_of_copies(public, list(zip(xs, lams, distances)), rho, power)
    theirs = mix_delta([(x - public, lam, d) for x, lam, d in zip(xs, lams, distances)], rho, power, per_copy=True)
    assert ours is not None and ours.shape == public.shape
    assert torch.equal(ours, theirs)


def test_nothing_pulls_when_every_weight_or_distance_rules_it_out():
    public = torch.zeros(10)
    far = torch.full((10,), float("nan"))
    assert mix_delta_of_copies(public, [(public + 1, 0.0, 3.0), (far, 0.5, math.nan)], 1.0) is None


def test_a_copy_of_another_shape_is_refused():
    with pytest.raises(ValueError, match="shape"):
        mix_delta_of_copies(torch.zeros(10), [(torch.zeros(11), 0.5, 1.0)], None)


def test_any_slice_of_the_change_is_that_slice_of_the_whole():
    from async_opt import MixChange

    n = 2 * PIECE + 17
    g = torch.Generator().manual_seed(1)
    public = torch.randn(n, generator=g).to(torch.bfloat16)  # half-width copies mix in float32
    xs = [(public.float() + 0.1 * torch.randn(n, generator=g)).to(torch.bfloat16) for _ in range(2)]
    change = MixChange(public, list(zip(xs, [0.3, 0.2], safe_distances(xs, public))), 0.5)
    whole = change.whole()
    assert whole.dtype == torch.float32 and change.moves
    for start, stop in ((0, 5), (PIECE - 3, PIECE + 4), (n - 9, n), (7, 2 * PIECE + 1)):
        assert torch.equal(change.piece(slice(start, stop)), whole[start:stop])
