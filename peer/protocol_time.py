"""What the protocol costs a peer, for the publish budget (`peer.core.publish_budget`).

Two parts: the training thread's own time in gossip work at step boundaries (partners' steps,
mixing, the parameter copy), timed there with a wall clock because that is the time training
waits; and the node worker's CPU seconds on our own gossip jobs (compress, sign, the exchanges we
start and their answers; not what we answer others, which their cadence causes), a running
total the worker keeps (`peer.net.node_worker.NodeWorker.protocol_cpu_s`).
The training thread reads both when it publishes and hands the cadence their sum.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator


def _zero() -> float:
    return 0.0


class ProtocolTime:
    """The protocol's seconds since the last `take`; owned by the training thread."""

    def __init__(self, timer: Callable[[], float], worker_cpu: Callable[[], float]) -> None:
        """`timer`: a wall clock for the training thread's gossip work; `worker_cpu`: the node
        worker's running total of CPU seconds on gossip jobs (read from this thread: one float)."""
        self.timer, self.worker_cpu = timer, worker_cpu
        self._training = 0.0
        self._worker_seen = worker_cpu()

    @classmethod
    def free(cls) -> "ProtocolTime":
        """A protocol that costs nothing: for drivers without real clocks (simnet, benchmarks
        on a fake clock), where a budget then keeps a publish every step."""
        return cls(_zero, _zero)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Count the time of the block as the training thread's gossip work."""
        start = self.timer()
        try:
            yield
        finally:
            self._training += self.timer() - start

    def take(self) -> float:
        """Seconds of protocol since the last call (the training thread's and the worker's)."""
        worker = self.worker_cpu()
        spent = self._training + max(0.0, worker - self._worker_seen)
        self._training, self._worker_seen = 0.0, worker
        return spent
