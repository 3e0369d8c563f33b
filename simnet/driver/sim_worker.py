"""The node worker thread of a real peer, in virtual time (see simnet/driver/sim_peer.py).

A real peer runs node work (compress, sign, verify, decode, apply) on one thread, one job at
a time; simulated peers do the same in virtual time, each job taking the CPU seconds the
cost model gives it, so a busy worker delays what queues behind it as it would for real.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from simnet.world.scheduler import Scheduler

Job = Callable[[], "tuple[float, Callable[[], None] | None]"]


class SimWorker:
    """A FIFO of jobs; each runs when the worker is free and returns (seconds it took, what follows)."""

    def __init__(self, sched: Scheduler, life: Callable[[], int]) -> None:
        self.sched, self.life = sched, life
        """`life()` is the owning peer's incarnation: work of a crashed incarnation is dropped."""
        self.jobs: deque[Job] = deque()
        self.busy = False

    def submit(self, job: Job) -> None:
        self.jobs.append(job)
        if not self.busy:
            self._next()

    def _next(self) -> None:
        if not self.jobs:
            self.busy = False
            return
        self.busy = True
        life = self.life()
        cost, then = self.jobs.popleft()()

        def done() -> None:
            if life != self.life():
                return
            if then is not None:
                then()
            self._next()

        self.sched.after(cost, done)
