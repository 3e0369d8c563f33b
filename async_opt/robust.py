"""Robust aggregation and probe auditing.

* :func:`coordinate_median` and :func:`trimmed_mean` are the coordinate-wise robust
  aggregators of Yin, Chen, Ramchandran & Bartlett 2018 ("Byzantine-Robust Distributed
  Learning: Towards Optimal Statistical Rates"). Both are known to be defeated by small,
  coordinated shifts inside the honest spread (ALIE, Baruch, Baruch & Goldberg 2019), so
  they complement, not replace, self-centred clipping.
* :class:`ProbeAudit` scores a tentative update on a small fixed probe batch and rejects
  it if the probe loss rises past a bound, in the manner of Zeno (Xie, Koyejo & Gupta
  2019, "Zeno: Distributed SGD with Suspicion-based Fault-tolerance").
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["coordinate_median", "trimmed_mean", "probe_audit", "ProbeAudit"]


def _stack(updates: Sequence[Tensor], what: str) -> Tensor:
    if len(updates) == 0:
        raise ValueError(f"{what}: needs at least one update")
    shape = updates[0].shape
    for idx, u in enumerate(updates):
        if u.shape != shape:
            raise ValueError(f"{what}: update {idx} has shape {tuple(u.shape)}, expected {tuple(shape)}")
    return torch.stack([u.detach() for u in updates])


def coordinate_median(updates: Sequence[Tensor]) -> Tensor:
    """Coordinate-wise median of Yin et al. 2018.

    For an even number of updates the median of a coordinate is the **mean of the two
    middle values** (unlike ``torch.median``, which returns the lower one), so the result
    does not depend on the order of the inputs. NaN sorts above every number, as in
    ``torch.sort``; filter non-finite updates before calling if that matters.
    """
    s, _ = torch.sort(_stack(updates, "coordinate_median"), dim=0)
    n = s.shape[0]
    if n % 2 == 1:
        return s[n // 2].clone()
    return (s[n // 2 - 1] + s[n // 2]) / 2


def trimmed_mean(updates: Sequence[Tensor], trim: int | float) -> Tensor:
    """Coordinate-wise trimmed mean of Yin et al. 2018.

    For each coordinate, drop the ``b`` largest and ``b`` smallest values and average the
    rest. ``trim`` is either the count ``b`` (an ``int >= 0``) or a fraction ``beta`` in
    ``[0, 0.5)`` (a ``float``), giving ``b = floor(beta * n)``. Requires ``2 b < n``.
    """
    s, _ = torch.sort(_stack(updates, "trimmed_mean"), dim=0)
    n = s.shape[0]
    if isinstance(trim, bool):
        raise ValueError("trimmed_mean: trim must be an int count or a float fraction, not bool")
    if isinstance(trim, int):
        b = trim
    elif isinstance(trim, float):
        if not (0.0 <= trim < 0.5):
            raise ValueError(f"trimmed_mean: fraction trim must be in [0, 0.5), got {trim!r}")
        b = math.floor(trim * n)
    else:
        raise ValueError(f"trimmed_mean: trim must be int or float, got {type(trim).__name__}")
    if b < 0 or 2 * b >= n:
        raise ValueError(f"trimmed_mean: cannot trim {b} from each end of {n} updates")
    return s[b : n - b].mean(dim=0)


def probe_audit(
    loss_fn: Callable[[Tensor], float],
    x_before: Tensor,
    x_after: Tensor,
    max_increase: float,
) -> tuple[bool, float]:
    """Probe audit in the manner of Zeno (Xie, Koyejo & Gupta 2019).

    Evaluates ``loss_fn`` on the parameters before and after a tentative mix and returns
    ``(accepted, increase)`` with ``increase = loss(x_after) - loss(x_before)``. The mix is
    accepted when ``increase <= max_increase`` and the loss after is finite.
    """
    if not (max_increase >= 0.0):
        raise ValueError(f"max_increase must be >= 0, got {max_increase!r}")
    before = float(loss_fn(x_before))
    after = float(loss_fn(x_after))
    increase = after - before
    if not math.isfinite(after):
        return False, math.inf
    return increase <= max_increase, increase


class ProbeAudit:
    """Probe audit with per-neighbour strikes (Zeno, Xie, Koyejo & Gupta 2019).

    Each rejected mix adds a strike to the neighbour that caused it and each accepted mix
    removes one (never below zero); a neighbour with ``max_strikes`` or more is
    ``suspect`` and should no longer be mixed in. ``max_increase`` is absolute, or
    relative to ``|loss(x_before)|`` when ``relative=True``.
    """

    def __init__(
        self,
        loss_fn: Callable[[Tensor], float],
        max_increase: float,
        relative: bool = False,
        max_strikes: int = 3,
    ) -> None:
        if not (max_increase >= 0.0):
            raise ValueError(f"max_increase must be >= 0, got {max_increase!r}")
        if max_strikes < 1:
            raise ValueError(f"max_strikes must be >= 1, got {max_strikes}")
        self.loss_fn = loss_fn
        self.max_increase = max_increase
        self.relative = relative
        self.max_strikes = max_strikes
        self.strikes: dict[Hashable, int] = {}

    def check(self, x_before: Tensor, x_after: Tensor) -> tuple[bool, float]:
        """Return ``(accepted, increase)`` for a tentative mix, without recording strikes."""
        if not self.relative:
            return probe_audit(self.loss_fn, x_before, x_after, self.max_increase)
        before = float(self.loss_fn(x_before))
        after = float(self.loss_fn(x_after))
        if not math.isfinite(after):
            return False, math.inf
        increase = after - before
        return increase <= self.max_increase * abs(before), increase

    def audit(self, neighbour: Hashable, x_before: Tensor, x_after: Tensor) -> tuple[bool, float]:
        """Check a mix caused by ``neighbour`` and update its strike count."""
        ok, increase = self.check(x_before, x_after)
        n = self.strikes.get(neighbour, 0)
        self.strikes[neighbour] = max(0, n - 1) if ok else n + 1
        return ok, increase

    def suspect(self, neighbour: Hashable) -> bool:
        """True when ``neighbour`` has at least ``max_strikes`` strikes."""
        return self.strikes.get(neighbour, 0) >= self.max_strikes

    def forget(self, neighbour: Hashable) -> None:
        """Drop the strike record of ``neighbour`` (e.g. when it leaves the table)."""
        self.strikes.pop(neighbour, None)
