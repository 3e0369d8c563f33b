"""The cadence the publish budget sets (peer.core.publish_budget): from fake costs, H rises while
the protocol is dear next to a step, falls back once it is cheap, does not swing, and a pinned
gossip_every holds whatever the costs."""

from __future__ import annotations

import pytest
import torch

from peer.core.cadence import PublishCadence
from peer.core.gossip_config import GossipConfig
from peer.core.publish_budget import CadenceReading, PublishBudget, budget_period
from peer.core.view import CopyView, MixView

STEP_S = 0.01


def run(cadence: PublishCadence, steps: range, protocol_s, step_s: float = STEP_S) -> list[int]:
    """Train `steps` at `step_s` each; each publish reports `protocol_s(k)` seconds of protocol
    since the last one. The steps that published."""
    published = []
    for k in steps:
        now = k * step_s
        if cadence.due(k, now):
            cadence.published(k, now, protocol_s(k))
            published.append(k)
    return published


def gaps(steps: list[int]) -> list[int]:
    return [b - a for a, b in zip(steps, steps[1:])]


def test_h_rises_while_the_protocol_is_dear_and_falls_back_once_it_is_cheap() -> None:
    c = GossipConfig(swarm="t").publish_cadence()  # the default: gossip_every unset, a 5% budget
    assert c.every == 1
    dear = run(c, range(1, 4000), lambda k: 0.2)  # 0.2 s a publish against 10 ms steps: 400 steps' worth at 5%
    assert c.every == budget_period(0.2, STEP_S, 0.05) == 512
    assert gaps(dear)[:10] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # one doubling per publish, no more
    assert c.reading().reason() == "budget 5%: protocol 0.2 s per publish, step 0.01 s → every 512 steps"
    cheap = run(c, range(4000, 12000), lambda k: 0.0001)
    assert c.every == 1 and gaps(cheap)[-5:] == [1] * 5
    assert all(b in (a // 2, a) for a, b in zip(gaps(cheap), gaps(cheap)[1:]))  # one halving per publish at most


def test_costs_near_the_boundary_do_not_make_it_swing() -> None:
    """Costs jittering ±10% around what 48 steps carry: H settles at 64 and stays."""
    c = PublishCadence(None, 0.0, budget=0.05)
    jitter = iter([1.1, 0.9] * 1000)
    run(c, range(1, 2000), lambda k: 0.05 * STEP_S * 48)
    assert c.every == 64
    settled = run(c, range(2000, 8000), lambda k: 0.05 * STEP_S * 48 * next(jitter))
    assert set(gaps(settled)) == {64}


def test_gossip_every_pins_the_cadence_whatever_the_costs() -> None:
    c = GossipConfig(swarm="t", gossip_every=4).publish_cadence()
    assert gaps(run(c, range(1, 200), lambda k: 10.0)) == [4] * 48
    assert c.every == 4 and c.reading() == CadenceReading(4)
    assert c.reading().reason() == "pinned by --gossip-every"
    one = GossipConfig(swarm="t", gossip_every=1).publish_cadence()  # 1 set by the user is not "unset"
    assert set(gaps(run(one, range(1, 100), lambda k: 10.0))) == {1}


def test_the_measured_period_follows_the_budget() -> None:
    """The rules that count in periods (staleness, partner steps, the step-size rule) read the
    real steps per publish, not a floor of one."""
    c = PublishCadence(None, 0.0, budget=0.05)
    run(c, range(1, 20000), lambda k: 0.2)
    assert c.period.steps() == c.every == 512


def test_a_clock_that_does_not_move_tells_nothing() -> None:
    """A driver on a fake clock (or a free protocol): a publish every step, as before the budget."""
    c = PublishCadence(None, 0.0, budget=0.05)
    assert set(gaps(run(c, range(1, 50), lambda k: 5.0, step_s=0.0))) == {1}
    assert c.reading().reason() == "budget 5%: not measured yet"
    free = PublishCadence(None, 0.0, budget=0.05)
    assert set(gaps(run(free, range(1, 50), lambda k: 0.0))) == {1}


def test_a_slow_peer_under_a_budget_still_catches_up_with_the_swarm() -> None:
    """H has grown to 512 steps of 10 ms; the neighbours publish every second: once 1.5 s have
    passed since our last publish one is due, long before 512 steps."""
    c = PublishCadence(None, 1.5, budget=0.05)
    run(c, range(1, 4000), lambda k: 0.2)
    assert c.every == 512
    x = torch.zeros(2)
    for second in range(1, 6):
        c.observe(MixView(x, tuple(CopyView(bytes([j]) * 32, second, x, float(second), second) for j in (1, 2))))
    last = run(c, range(4000, 4400), lambda k: 0.2)
    assert gaps(last) and max(gaps(last)) <= 151  # 1.5 s of 10 ms steps


@pytest.mark.parametrize("budget", [0.0, 1.0, -0.1, float("nan")])
def test_a_budget_outside_zero_to_one_is_refused_naming_the_setting(budget: float) -> None:
    with pytest.raises(ValueError, match="publish_budget must be a share of training time in \\(0, 1\\)"):
        GossipConfig(swarm="t", publish_budget=budget)
    with pytest.raises(ValueError):
        PublishBudget(budget)


def test_budget_period_is_the_smallest_power_of_two_within_the_budget() -> None:
    assert budget_period(0.0, 0.1, 0.05) == 1
    assert budget_period(0.005, 0.1, 0.05) == 1
    assert budget_period(0.0051, 0.1, 0.05) == 2
    assert budget_period(1.2, 0.05, 0.05) == 512
