"""Where the pure core counts what it did, without importing the peer's metrics registry.

`peer.metrics.Metrics` satisfies `MetricsSink`; tests and simnet may pass their own, and
`NoMetrics` counts nothing.
"""

from __future__ import annotations

from typing import Protocol


class MetricsSink(Protocol):
    """Counters and gauges the node writes (peer.metrics.Metrics, or a test double)."""

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None: ...

    def set(self, name: str, value: float, **labels: str) -> None: ...


class NoMetrics:
    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        pass

    def set(self, name: str, value: float, **labels: str) -> None:
        pass
