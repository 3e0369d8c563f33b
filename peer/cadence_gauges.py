"""The publish cadence on /metrics, and read back from there for the progress line and the status page.

The training thread owns the cadence; the progress line and the status page run elsewhere and
read `Metrics` (thread-safe), so the cadence travels as gauges: steps per publish aimed at,
the budget (0: pinned), and the two measured costs the budget weighs.
"""

from __future__ import annotations

from peer.core.publish_budget import CadenceReading
from peer.metrics import Metrics


def record(metrics: Metrics, reading: CadenceReading) -> None:
    """Set the cadence's gauges (an unmeasured cost stays 0)."""
    metrics.set("publish_every_steps", reading.every)
    metrics.set("publish_budget", reading.budget or 0.0)
    metrics.set("publish_protocol_seconds", reading.protocol_s or 0.0)
    metrics.set("publish_step_seconds", reading.step_s or 0.0)


def read(metrics: Metrics) -> CadenceReading | None:
    """The cadence as last recorded (None before it was)."""
    every = int(metrics.get("publish_every_steps"))
    if every < 1:
        return None
    budget, protocol_s = metrics.get("publish_budget"), metrics.get("publish_protocol_seconds")
    step_s = metrics.get("publish_step_seconds")
    measured = step_s > 0
    return CadenceReading(every, budget or None, protocol_s if measured else None, step_s if measured else None)
