"""A discrete-event scheduler with virtual time.

Every simulated peer, link and baseline runs as callbacks on one heap ordered by
(time, insertion order), so two runs with the same seed execute the same callbacks in the
same order: that is what makes simnet reproducible bit for bit. Virtual time only moves
when an event is taken off the heap; real computation (forward/backward passes, frame
signing) takes no virtual time unless a model says it does.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable

Event = Callable[[], None]


class Scheduler:
    """A heap of timed callbacks and the virtual clock they share."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._heap: list[tuple[float, int, Event]] = []
        self._order = itertools.count()
        self.events_run = 0

    def now(self) -> float:
        """Virtual seconds since the start of the run."""
        return self._now

    def at(self, t: float, fn: Event) -> None:
        """Run `fn` at virtual time `t` (never before now)."""
        if t != t:  # NaN would corrupt the heap order
            raise ValueError("event time is NaN")
        heapq.heappush(self._heap, (max(float(t), self._now), next(self._order), fn))

    def after(self, dt: float, fn: Event) -> None:
        """Run `fn` `dt` virtual seconds from now."""
        if dt < 0:
            raise ValueError(f"delay must be >= 0, got {dt}")
        self.at(self._now + dt, fn)

    def pending(self) -> int:
        return len(self._heap)

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def run_until(self, t_end: float, stop: Callable[[], bool] | None = None, check_every: int = 64) -> bool:
        """Run events up to and including `t_end`; returns False when `stop()` cut it short.

        `stop` is polled every `check_every` events (it may look at real time or a flag).
        The clock ends at `t_end` when the heap runs dry or only later events remain.
        """
        n = 0
        while self._heap and self._heap[0][0] <= t_end:
            t, _, fn = heapq.heappop(self._heap)
            self._now = t
            fn()
            self.events_run += 1
            n += 1
            if stop is not None and n % check_every == 0 and stop():
                return False
        self._now = max(self._now, t_end)
        return True


class VirtualClock:
    """The `clock=` a GossipNode gets: an epoch offset plus the scheduler's virtual time.

    The offset makes timestamps look like Unix time, so frames carry ordinary values and
    every node's epoch (derived from its clock at start) is distinct from zero.
    """

    def __init__(self, scheduler: Scheduler, epoch: float = 1.7e9) -> None:
        self.scheduler = scheduler
        self.epoch = float(epoch)

    def __call__(self) -> float:
        return self.epoch + self.scheduler.now()
