"""Time left in a run of like items (clips spoken, clips heard), at the pace measured so far in it.

A judge on a CPU takes minutes and its pace moves with the machine's load, so the time left is
measured from the items already done, not taken from a table.
"""

from __future__ import annotations

import time
from typing import Callable


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


class Countdown:
    """`total` items from now; `tick` after each says how long the rest should take."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.done = 0
        self._clock = clock
        self._start = clock()

    def tick(self) -> None:
        """One more item done."""
        self.done += 1

    @property
    def seconds_left(self) -> float | None:
        """The rest at the pace so far (None before the first item)."""
        if not self.done:
            return None
        return (self._clock() - self._start) / self.done * max(0, self.total - self.done)

    def left(self, what: str) -> str:
        """`~T left to WHAT` ("" before the first item)."""
        seconds = self.seconds_left
        return "" if seconds is None else f"~{minutes(seconds)} left to {what}"
