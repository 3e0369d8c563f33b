"""When a peer publishes: every gossip_every steps, and at the swarm's pace when it is much
slower than the median neighbour (peer.core.cadence)."""

from __future__ import annotations

import pytest
import torch

from peer.core.cadence import PublishCadence
from peer.core.view import CopyView, MixView

X = torch.zeros(2)


def _view(*copies: tuple[bytes, int, float]) -> MixView:
    return MixView(X, tuple(CopyView(key, seq, X, t, seq) for key, seq, t in copies))


def _feed(c: PublishCadence, period_s: dict[bytes, float], until: float) -> None:
    """Neighbours publishing every `period_s[key]` seconds, seen in views taken every 0.1 s
    (a view holds every neighbour's newest version, once it has one)."""
    for tick in range(1, int(until * 10) + 1):
        t = tick / 10
        latest = [(key, int(t / p), int(t / p) * p) for key, p in period_s.items() if t >= p]
        c.observe(_view(*latest))


def test_without_neighbours_it_publishes_every_gossip_every_steps() -> None:
    c = PublishCadence(4, catch_up=1.5)
    due = [k for k in range(1, 13) if c.due(k, now=float(k)) and (c.published(k, float(k)) or True)]
    assert due == [4, 8, 12]


def test_the_swarm_period_is_the_median_neighbours() -> None:
    c = PublishCadence(4, catch_up=1.5)
    assert c.swarm_period() is None
    _feed(c, {b"a": 1.0, b"b": 2.0, b"c": 100.0}, until=10.0)  # c published once: no period yet
    assert c.swarm_period() == pytest.approx(1.5)
    _feed(c, {b"a": 1.0, b"b": 2.0, b"c": 0.01}, until=10.0)  # one liar claiming 100 publishes a second
    assert c.swarm_period() == pytest.approx(1.0)


def test_a_peer_four_times_slower_publishes_at_the_swarms_pace() -> None:
    """Its steps take 4 s; the others publish every 1 s (4 steps of 0.25 s)."""
    c = PublishCadence(4, catch_up=1.5)
    _feed(c, {b"a": 1.0, b"b": 1.0, b"c": 1.0}, until=8.0)
    due = []
    for k in range(1, 13):
        now = 4.0 * k
        if c.due(k, now):
            c.published(k, now)
            due.append(k)
    assert due == [4, 5, 6, 7, 8, 9, 10, 11, 12]  # after the first publish: every step (4 s >= 1.5 s)
    off = PublishCadence(4, catch_up=0)
    _feed(off, {b"a": 1.0, b"b": 1.0, b"c": 1.0}, until=8.0)
    assert [k for k in range(1, 13) if off.due(k, 4.0 * k) and (off.published(k, 4.0 * k) or True)] == [4, 8, 12]


def test_peers_of_about_equal_speed_keep_their_own_count() -> None:
    """Steps of 0.25 s, neighbours publishing every 0.9 s (10% faster than our 1 s period)."""
    c = PublishCadence(4, catch_up=1.5)
    _feed(c, {b"a": 0.9, b"b": 0.9}, until=10.0)
    due = [k for k in range(1, 25) if c.due(k, 0.25 * k) and (c.published(k, 0.25 * k) or True)]
    assert due == [4, 8, 12, 16, 20, 24]


def test_a_neighbour_that_restarts_is_measured_afresh() -> None:
    c = PublishCadence(4, catch_up=1.5)
    c.observe(_view((b"a", 10, 10.0)))
    c.observe(_view((b"a", 12, 12.0)))
    assert c.swarm_period() == pytest.approx(1.0)
    c.observe(_view((b"a", 1, 100.0)))  # a new run: seq 1 again
    assert c.swarm_period() is None
    c.observe(_view())  # forgotten
    assert c._seen == {}


@pytest.mark.parametrize("every, catch_up", [(0, 1.5), (4, -1.0), (4, float("nan"))])
def test_bad_settings_are_refused(every: int, catch_up: float) -> None:
    with pytest.raises(ValueError):
        PublishCadence(every, catch_up)


def test_our_period_is_measured_from_our_publishes():
    """The lower median of the last gaps, never below the setting; one long pause does not
    stretch it; a step before the last one (a new run) measures afresh."""
    from peer.core.cadence import PublishPeriod

    period = PublishPeriod(4)
    assert period.steps() == 4
    for step in (0, 10, 20, 30, 130, 140):
        period.published(step)
    assert period.steps() == 10
    period.published(2)
    assert period.steps() == 4
    small = PublishPeriod(4)
    for step in (0, 1, 2, 3):
        small.published(step)
    assert small.steps() == 4
