"""When to publish: every H steps, and sooner when we are much slower than the swarm.

H is `gossip_every` where that is set, else what the publish budget picks from the measured
cost of the protocol and of a step (`peer.core.publish_budget`).

A peer publishes, exchanges and lets each neighbour pull once per publish of its own
(`peer.core.mixer`). Counted in its own steps alone, a peer k times slower than the others
mixes k times less often per second while they run away from it, and its averaged weights lag
the swarm's (docs/benchmarks/head-to-head.md#quiet-machine-4-processes-per-arm-live-and-averaged-weights-the-current-figures).
So a publish is also due once `catch_up` × the median
neighbour's publish period has passed since our last one: a peer slower than that publishes
at the swarm's pace (at most once per step), and peers of about equal speed, which never fall
that far behind, keep their own step count.

The neighbours' periods come from their copies: the seq and publication time of each newer
version (`CopyView.seq`, `CopyView.published_at`), over their last few versions. The median
over neighbours means a minority that claims to publish very often cannot make us publish more;
the most it could make us do is publish once per step. Owned by the training thread.
"""

from __future__ import annotations

import statistics
from collections import deque

from peer.core.publish_budget import CadenceReading, PublishBudget
from peer.core.view import MixView

HISTORY = 8
"""Versions kept per neighbour to measure its publish period; also our own publishes kept to measure ours."""


class PublishPeriod:
    """Our own steps per publish, as measured: the lower median of the steps between our last
    publishes, never below `floor` (a pinned `gossip_every`, else 1), and `floor` before two
    publishes.

    What the cadence aims at is only the shortest period: a copy is taken when the node worker
    is free, so the period is also what the worker keeps up with. The rules that depend on how
    long a period is (staleness counted in periods, a partner's steps per period, the step-size
    rule's local steps per mix) read this.
    The lower median: one long pause (a checkpoint, a stall) does not stretch it."""

    def __init__(self, floor: int) -> None:
        if floor < 1:
            raise ValueError(f"a publish period is at least 1 step, got {floor}")
        self.floor = floor
        self._gaps: deque[int] = deque(maxlen=HISTORY)
        self._last: int | None = None

    def published(self, step: int) -> None:
        """We published at `step` (a step before the last one: a new run, measured afresh)."""
        if self._last is not None and step < self._last:
            self._gaps.clear()
        elif self._last is not None and step > self._last:
            self._gaps.append(step - self._last)
        self._last = step

    def steps(self) -> int:
        if not self._gaps:
            return self.floor
        ordered = sorted(self._gaps)
        return max(self.floor, ordered[(len(ordered) - 1) // 2])


class PublishCadence:
    """Decides at each step boundary whether a publish is due.

    `gossip_every` pins the steps per publish; None lets `budget` (a share of training time, in
    (0, 1)) set them from what each period cost (`published`)."""

    def __init__(self, gossip_every: int | None, catch_up: float, budget: float | None = None) -> None:
        if gossip_every is not None and gossip_every < 1:
            raise ValueError(f"gossip_every must be >= 1, got {gossip_every}")
        if gossip_every is None and budget is None:
            raise ValueError("a publish cadence needs gossip_every or a budget")
        if not catch_up >= 0:
            raise ValueError(f"catch_up must be >= 0 (0: off), got {catch_up!r}")
        self.pinned, self.catch_up = gossip_every, catch_up
        self.budget = PublishBudget(budget) if gossip_every is None and budget is not None else None
        self.period = PublishPeriod(gossip_every or 1)
        """Our steps per publish as they come out (`PublishPeriod`)."""
        self._seen: dict[bytes, deque[tuple[int, float]]] = {}
        self._last_publish: tuple[int, float] | None = None
        """(step, time) of our last publish."""

    @property
    def every(self) -> int:
        """The steps per publish aimed at: the pinned ones, or the budget's."""
        return self.pinned if self.budget is None else self.budget.every

    def reading(self) -> CadenceReading:
        """What the cadence aims at and why."""
        return CadenceReading(self.every) if self.budget is None else self.budget.reading()

    def observe(self, view: MixView) -> None:
        """Record the newest version of each copy (cheap: no tensor work)."""
        live = set()
        for c in view.copies:
            live.add(c.key)
            seen = self._seen.setdefault(c.key, deque(maxlen=HISTORY))
            if seen and c.seq < seen[-1][0]:  # a new run of that neighbour: its seq starts again
                seen.clear()
            if not seen or c.seq > seen[-1][0]:
                seen.append((c.seq, c.published_at))
        for key in [k for k in self._seen if k not in live]:
            del self._seen[key]

    def swarm_period(self) -> float | None:
        """The median neighbour's seconds per publish, None before any neighbour published twice."""
        periods = []
        for seen in self._seen.values():
            (seq0, t0), (seq1, t1) = seen[0], seen[-1]
            if seq1 > seq0 and t1 > t0:
                periods.append((t1 - t0) / (seq1 - seq0))
        return statistics.median(periods) if periods else None

    def due(self, step: int, now: float) -> bool:
        """Whether to publish at this boundary (then call `published`): every `every` steps
        (at multiples of it until a publish comes sooner, then counted from that publish), or
        once `catch_up` × the swarm's period has passed."""
        if self._last_publish is None:
            return step % self.every == 0
        last_step, last_time = self._last_publish
        if step - last_step >= self.every:
            return True
        period = self.swarm_period() if self.catch_up > 0 else None
        return period is not None and step > last_step and now - last_time >= self.catch_up * period

    def published(self, step: int, now: float, protocol_s: float = 0.0) -> None:
        """We publish at `step`; `protocol_s`: the protocol's seconds since our last publish (the
        training thread's and the node worker's), which the budget weighs against the period's time."""
        if self.budget is not None and self._last_publish is not None:
            last_step, last_time = self._last_publish
            self.budget.period_ended(step - last_step, now - last_time, protocol_s)
        self._last_publish = (step, now)
        self.period.published(step)
