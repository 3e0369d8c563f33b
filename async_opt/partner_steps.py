"""Partner steps: each peer also takes the training steps of the partners it pulls.

Averaging models (the consensus step) removes the noise of each replica's batches only as fast
as the copies mix; one partner per period leaves each peer stepping on one batch. Here a
sender also publishes its own training steps since its previous publish (the change its
optimiser made, without what it mixed in), compressed with their own error feedback, and a
receiver adds ``weight`` × the sum of a pulled partner's steps to its parameters: a step on
several peers' batches, as data parallelism takes, without waiting for anyone. It replaces
the larger step size (``step_scale``) the consensus step needs on its own: both at once
overshoot. See docs/mixing.md ("Partner steps").

What one pull may add is bounded by our own steps, never by the sender: ``multiplier`` × the
median norm of our own recent steps per publish, times our publishes since we last took that
partner's steps. An honest partner training alike is not shortened; a sum beyond the bound is
shortened as a copy beyond the clipping radius pulls (``clip_power``: at 2 the farther, the less),
so a liar moves us at most ``weight`` × the bound, only when we chose it, and less the more it
overshoots.
"""

from __future__ import annotations

import math
from collections import deque

import torch

from .mixing import pull_scale, safe_norm

__all__ = ["OwnStepNorms", "bounded_sum"]


class OwnStepNorms:
    """The norms of our own recent steps per publish, and the bound they set on a partner's."""

    def __init__(self, window: int, multiplier: float) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not (multiplier > 0.0 and math.isfinite(multiplier)):
            raise ValueError(f"multiplier must be finite and > 0, got {multiplier!r}")
        self.multiplier = multiplier
        self._norms: deque[float] = deque(maxlen=window)

    def observe(self, norm: float) -> None:
        """Record the norm of one publish period's own steps (non-finite norms are ignored)."""
        if math.isfinite(norm) and norm >= 0.0:
            self._norms.append(float(norm))

    def clear(self) -> None:
        self._norms.clear()

    def bound(self, periods: int) -> float:
        """The most `periods` publish periods of a partner's steps may add: 0 until we know our own."""
        if not self._norms:
            return 0.0
        median = sorted(self._norms)[(len(self._norms) - 1) // 2]
        return self.multiplier * median * max(1, int(periods))


def bounded_sum(steps: torch.Tensor, bound: float, weight: float, power: float = 1.0
                ) -> tuple[torch.Tensor | None, bool]:
    """(``weight`` × `steps`, shortened as a clipped copy's pull is: by (bound / norm) ** `power`
    past `bound`, so at ``power`` 2 a sum ten bounds long adds a tenth of one; whether it was
    shortened). None in place of the tensor when nothing may be added (a zero bound, a zero or
    non-finite sum). Always a new tensor."""
    if not (bound > 0.0 and weight > 0.0):
        return None, False
    norm = safe_norm(steps)
    if not (math.isfinite(norm) and norm > 0.0):
        return None, False
    return steps * (weight * pull_scale(norm, bound, power)), norm > bound
