"""How often to publish when no one pinned it: as often as keeps the protocol under a share of training.

A publish costs the peer time on its training thread (mixing, the parameter copy) and CPU on
its node worker (compressing, signing, the exchanges it starts and answers). At a small model
that is a sliver of a step, and a publish every step is what mixes best (docs/mixing.md); at
a large one a publish costs many steps, and publishing every step would spend training on
gossip. So the period H is the shortest power of two at which the protocol's seconds per
publish stay within `budget` × the seconds of H steps (`GossipConfig.publish_budget`).

H moves by one doubling or halving per publish, and halves only when half the period would
stay within `SLACK` of the budget: one noisy period cannot make it swing back and forth. Pure:
the caller measures the seconds and passes them in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SMOOTHING = 0.25
"""Weight of the newest period in the estimates of protocol seconds per publish and seconds per step."""
SLACK = 0.8
"""H halves only when half the period would spend at most this share of the budget."""


@dataclass(frozen=True)
class CadenceReading:
    """The publish cadence and its reason, as the progress line, /metrics and the status page show it."""

    every: int
    """Steps per publish the cadence aims at (catching up with the swarm, or a busy worker, may change the period)."""
    budget: float | None = None
    """The protocol's share of training time allowed (None: `every` is pinned by `gossip_every`)."""
    protocol_s: float | None = None
    """Protocol seconds per publish as measured (None before a period was measured)."""
    step_s: float | None = None
    """Seconds per training step as measured (None before a period was measured)."""

    def reason(self) -> str:
        """"budget 5%: protocol 1.2 s per publish, step 0.05 s → every 512 steps", or "pinned by --gossip-every"."""
        if self.budget is None:
            return "pinned by --gossip-every"
        if self.protocol_s is None or self.step_s is None:
            return f"budget {self.budget * 100:g}%: not measured yet"
        every = "every step" if self.every == 1 else f"every {self.every} steps"
        return (f"budget {self.budget * 100:g}%: protocol {self.protocol_s:.2g} s per publish, "
                f"step {self.step_s:.2g} s → {every}")


class PublishBudget:
    """Picks the steps per publish from the measured cost of the protocol and of a step."""

    def __init__(self, budget: float) -> None:
        if not 0 < budget < 1:
            raise ValueError(f"a publish budget is a share of training time in (0, 1), got {budget!r}")
        self.budget = budget
        self.every = 1
        """Steps per publish: one until a period shows the protocol costs more than the budget allows."""
        self.protocol_s: float | None = None
        self.step_s: float | None = None

    def period_ended(self, steps: int, seconds: float, protocol_s: float) -> int:
        """A publish period of `steps` steps took `seconds` (wall time), of which the protocol cost
        `protocol_s`: update the estimates and return the new steps per publish. A period that
        tells nothing (no steps, no time passed, as under a fake clock) changes nothing."""
        if steps < 1 or not 0 < seconds < math.inf or not 0 <= protocol_s < math.inf:
            return self.every
        self.step_s = _smoothed(self.step_s, seconds / steps)
        self.protocol_s = _smoothed(self.protocol_s, protocol_s)
        allowed = self.budget * self.step_s  # protocol seconds that one step's time may carry
        if self.protocol_s > allowed * self.every:
            self.every *= 2
        elif self.every > 1 and self.protocol_s <= SLACK * allowed * (self.every // 2):
            self.every //= 2
        return self.every

    def reading(self) -> CadenceReading:
        return CadenceReading(self.every, self.budget, self.protocol_s, self.step_s)


def budget_period(protocol_s: float, step_s: float, budget: float) -> int:
    """Where `PublishBudget` settles for these costs: the smallest power of two H with
    protocol_s ≤ budget × H × step_s (benchmarks extrapolate with it)."""
    if not step_s > 0 or not 0 < budget < 1:
        raise ValueError(f"step seconds must be > 0 and the budget in (0, 1), got {step_s!r}, {budget!r}")
    every = 1
    while protocol_s > budget * step_s * every:
        every *= 2
    return every


def _smoothed(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new
