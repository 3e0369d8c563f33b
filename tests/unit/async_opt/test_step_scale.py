"""The step-size rule: exact values of the effective number of models and the bounded, warmed-up multiplier."""

import math

import pytest

from async_opt import SwarmStepScale, effective_models
from peer.core.gossip_config import GossipConfig


@pytest.mark.parametrize("weights, n", [([], 1.0), ([0.5], 2.0), ([1 / 3, 1 / 3], 3.0), ([0.25] * 3, 4.0),
                                        ([0.1], 1 / (0.81 + 0.01))])
def test_the_effective_number_of_models_of_a_mixing_row(weights, n):
    assert effective_models(weights) == pytest.approx(n)


@pytest.mark.parametrize("bad", [[-0.1], [math.nan], [0.6, 0.6]])
def test_weights_that_are_no_mixing_row_are_refused(bad):
    with pytest.raises(ValueError, match="mixing weights"):
        effective_models(bad)


def test_a_peer_alone_trains_at_its_own_step_size():
    rule = SwarmStepScale(max_scale=4.0)
    for _ in range(100):
        assert rule.period_ended([]) == 1.0


def test_the_multiplier_rises_over_the_warm_up_and_stops_at_the_bound():
    rule = SwarmStepScale(max_scale=4.0, warmup_periods=6)  # rises at most 0.5 per period
    values = [rule.period_ended([0.25, 0.25, 0.25]) for _ in range(10)]  # n_eff 4
    assert values[:6] == pytest.approx([1.5, 2.0, 2.5, 3.0, 3.5, 4.0]) and values[6:] == [4.0] * 4
    capped = SwarmStepScale(max_scale=2.0, warmup_periods=1)
    assert [capped.period_ended([0.25] * 3) for _ in range(3)] == [2.0, 2.0, 2.0]


def test_it_falls_at_once_when_the_partners_go_and_a_burst_does_not_raise_it():
    rule = SwarmStepScale(max_scale=4.0, window=3, warmup_periods=1)
    for _ in range(3):
        rule.period_ended([1 / 3, 1 / 3])
    assert rule.value == pytest.approx(3.0)
    assert rule.period_ended([]) == pytest.approx(3.0)  # lower median of (3, 3, 1)
    assert rule.period_ended([]) == pytest.approx(1.0)  # of (3, 1, 1): alone again
    quiet = SwarmStepScale(max_scale=4.0, window=3, warmup_periods=1)
    assert [quiet.period_ended(w) for w in ([], [0.25] * 3, [])] == pytest.approx([1.0, 1.0, 1.0])


def test_local_steps_between_mixes_count_against_the_models_averaged():
    """With H steps between two mixes each peer steps H times on its own batches alone: (1 + (n − 1)/H)."""
    for steps, expected in ((1, 3.0), (2, 2.0), (4, 1.5)):
        rule = SwarmStepScale(max_scale=8.0, warmup_periods=1, steps_per_period=steps)
        assert rule.period_ended([1 / 3, 1 / 3]) == pytest.approx(expected)


def test_a_pinned_multiplier_is_what_the_trainer_gets_and_bad_settings_are_refused():
    rule = GossipConfig(step_scale=2.5).step_scale_rule()
    assert rule.value == 2.5 and rule.period_ended([]) == 2.5
    assert GossipConfig(step_scale_max=1.0).step_scale_rule().period_ended([1 / 3, 1 / 3]) == 1.0  # off
    for bad in (dict(step_scale_max=0.5), dict(step_scale=-1.0), dict(step_scale_power=0.0),
                dict(step_scale_warmup_periods=0), dict(step_scale_max=math.inf)):
        with pytest.raises(ValueError, match="step_scale"):
            GossipConfig(**bad)


def test_with_decay_steps_the_part_above_one_shrinks_as_k_over_k_plus_step():
    """Larger early, 1 late: at step K half the measured boost is left, at 3K a quarter; the same
    swarm without decay keeps all of it, and a bad K is refused by the config with its name."""
    full_pair = [0.5]  # n_eff 2: the linear rule's multiplier is 2
    kept, decayed = SwarmStepScale(4.0, warmup_periods=1), SwarmStepScale(4.0, warmup_periods=1, decay_steps=100)
    assert [kept.period_ended(full_pair, k) for k in (0, 100, 300)] == pytest.approx([2.0, 2.0, 2.0])
    assert [decayed.period_ended(full_pair, k) for k in (0, 100, 300)] == pytest.approx([2.0, 1.5, 1.25])
    alone = SwarmStepScale(4.0, warmup_periods=1, decay_steps=100)
    assert alone.period_ended([], 10) == 1.0  # a peer alone trains at its own rate, decay or not
    with pytest.raises(ValueError, match="step_scale.*decay_steps"):
        GossipConfig(step_scale_decay_steps=-1)
    assert GossipConfig(step_scale_decay_steps=50, partner_steps=0.0).step_scale_rule().decay_steps == 50


def test_the_local_steps_per_mix_are_the_measured_ones_where_given():
    """n_eff 4 over periods of 30 measured steps: 1 + 3/30, whatever the configured period says."""
    rule = SwarmStepScale(max_scale=4.0, warmup_periods=1)
    assert rule.period_ended([0.25] * 3, 0, steps_per_period=30) == pytest.approx(1.1)
    assert SwarmStepScale(max_scale=4.0, warmup_periods=1).period_ended([0.25] * 3) == pytest.approx(4.0)
