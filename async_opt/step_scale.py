"""The step-size multiplier a gossiping peer may take: measured from the models its mixing averages.

Averaging the Adam or SGD steps of n replicas moves the average less far than one replica
stepping on the averaged gradient would, and data parallelism recovers that speed by a step
size that grows with the number of replicas averaged (Goyal et al. 2017's linear scaling
rule; DiLoCo, Douillard et al. 2023, and NoLoCo, Kolehmainen et al. 2025, tune their inner
step the same way). A gossip peer does not average every replica every step: what it averages
is one row of a mixing matrix per publish period, (1 − Σλ_j, λ_1, …, λ_m). The number of
models that row is worth is its effective sample size, n_eff = 1 / Σ w², which is 1 alone, 2
for a full pair average and m + 1 for an exact mean of m + 1 models; staleness discounts and
clipping shrink it as they shrink the weights. Between two mixes each peer takes H local steps
on its own batches alone, and that noise is what a larger step amplifies, so the rule counts
the other models averaged in per local step: the multiplier is (1 + (n_eff − 1) / H) ** power,
bounded by ``max_scale``, taken as the lower median of the last ``window`` periods (a burst of copies in
one period does not raise it), raised at most ``(max_scale − 1) / warmup_periods`` per period
and lowered at once: a peer whose partners vanish steps at its own rate again at its next
publish. A neighbour cannot raise it past what the mixer lets any copy weigh.

With ``decay_steps`` K > 0 the part above 1 shrinks as training goes on, by K / (K + k) at step
k: under Adam the larger step buys speed while the loss falls fast and costs loss late in a run,
where a quieter gradient is what counts (docs/benchmarks/mixing-rule.md#the-step-size-multiplier-helps-early-and-costs-later).
The step is the trainer's, which a joiner takes over from the state it adopts.

Pure: no clocks, no tensors; the step-boundary hook feeds it the weights the mixer used.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

__all__ = ["effective_models", "SwarmStepScale"]


def effective_models(weights: Sequence[float]) -> float:
    """n_eff = 1 / Σ w² of the mixing row (1 − Σλ, λ_1, …): how many models the period averaged
    (Kish's effective sample size; the count the linear scaling rule of Goyal et al. 2017 scales by).

    Weights must be finite, >= 0 and sum to at most 1 (the mixer's period budget keeps them so).
    """
    total = 0.0
    for w in weights:
        w = float(w)
        if not (math.isfinite(w) and w >= 0.0):
            raise ValueError(f"mixing weights must be finite and >= 0, got {w!r}")
        total += w
    if total > 1.0 + 1e-9:
        raise ValueError(f"mixing weights must sum to at most 1, got {total!r}")
    own = max(0.0, 1.0 - total)
    return 1.0 / (own * own + sum(float(w) ** 2 for w in weights))


class SwarmStepScale:
    """The step-size multiplier for the swarm this peer actually mixes with: the linear scaling rule
    (Goyal et al. 2017) applied to the models its mixing averages (module docstring)."""

    def __init__(self, max_scale: float, power: float = 1.0, window: int = 8, warmup_periods: int = 25,
                 pinned: float | None = None, steps_per_period: int = 1, decay_steps: int = 0) -> None:
        if not (max_scale >= 1.0 and math.isfinite(max_scale)):
            raise ValueError(f"max_scale must be finite and >= 1 (1: off), got {max_scale!r}")
        if not (power > 0.0 and math.isfinite(power)):
            raise ValueError(f"power must be finite and > 0, got {power!r}")
        if window < 1 or warmup_periods < 1 or steps_per_period < 1:
            raise ValueError(f"window, warmup_periods and steps_per_period must be >= 1, got {window}, "
                             f"{warmup_periods}, {steps_per_period}")
        if decay_steps < 0:
            raise ValueError(f"decay_steps must be >= 0 (0: no decay), got {decay_steps}")
        if pinned is not None and not (pinned > 0.0 and math.isfinite(pinned)):
            raise ValueError(f"a pinned step scale must be finite and > 0, got {pinned!r}")
        self.max_scale, self.power, self.pinned = float(max_scale), float(power), pinned
        self.steps_per_period, self.decay_steps = steps_per_period, decay_steps
        self.rise = (self.max_scale - 1.0) / warmup_periods
        self._recent: deque[float] = deque(maxlen=window)
        self._value = 1.0

    @property
    def value(self) -> float:
        """The multiplier to train with now (the pinned one, when pinned)."""
        return self.pinned if self.pinned is not None else self._value

    def period_ended(self, weights: Sequence[float], step: int = 0, steps_per_period: int | None = None) -> float:
        """Record the weights one publish period mixed (empty: none), ending at the trainer's `step`,
        and return the new value. `steps_per_period`: the local steps between our mixes as
        measured, where they outnumber the configured ones (None: the configured)."""
        self._recent.append(effective_models(weights))
        ordered = sorted(self._recent)
        n_eff = ordered[(len(ordered) - 1) // 2]  # the lower median
        local = self.steps_per_period if steps_per_period is None else max(1, steps_per_period)
        target = min(self.max_scale, (1.0 + (n_eff - 1.0) / local) ** self.power)
        if self.decay_steps:
            target = 1.0 + (target - 1.0) * self.decay_steps / (self.decay_steps + max(0, step))
        self._value = target if target <= self._value else min(target, self._value + self.rise)
        return self.value
