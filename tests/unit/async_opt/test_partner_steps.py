"""The bound on a partner's steps comes from our own steps, and what is added is exactly weight × the sum."""

import math

import pytest
import torch

from async_opt.partner_steps import OwnStepNorms, bounded_sum


def test_bound_is_the_multiple_of_our_median_step_norm_per_period():
    norms = OwnStepNorms(window=3, multiplier=2.0)
    assert norms.bound(1) == 0.0  # nothing known of our own steps: nothing may be added
    for n in (1.0, 5.0, 3.0, 100.0):  # the window keeps the last three: 5, 3, 100 -> median 5
        norms.observe(n)
    norms.observe(math.nan)  # ignored
    assert norms.bound(1) == 10.0
    assert norms.bound(3) == 30.0
    assert norms.bound(0) == 10.0  # taken within the period it was first heard in: one period


def test_a_sum_within_the_bound_is_added_at_the_weight_and_a_larger_one_is_shortened():
    steps = torch.tensor([3.0, 4.0])  # norm 5
    added, shortened = bounded_sum(steps, 10.0, 0.5)
    assert torch.equal(added, torch.tensor([1.5, 2.0])) and not shortened
    added, shortened = bounded_sum(steps, 2.5, 0.5)  # half the norm allowed, then the weight
    assert torch.allclose(added, torch.tensor([0.75, 1.0])) and shortened
    added, _ = bounded_sum(steps, 2.5, 0.5, power=2.0)  # twice the bound: a quarter of the sum
    assert torch.allclose(added, torch.tensor([0.375, 0.5]))
    assert bounded_sum(steps, 0.0, 0.5) == (None, False)
    assert bounded_sum(torch.zeros(2), 1.0, 0.5) == (None, False)
    assert bounded_sum(torch.tensor([math.inf, 0.0]), 1.0, 0.5) == (None, False)


@pytest.mark.parametrize("window, multiplier", [(0, 1.0), (4, 0.0), (4, math.inf)])
def test_bad_settings_are_refused(window, multiplier):
    with pytest.raises(ValueError):
        OwnStepNorms(window, multiplier)
