"""The training thread's half of gossip: mix news into the parameters at a step boundary.

Owned by the training thread alone. It reads a `MixView` (see `peer.core.view`: the caller
holds `ViewSlot.reading` while tensors are read) and mixes no copy the view marks busy, so it
never waits for the node worker's compressing, signing or decoding. What it keeps (the
step-time estimate, the clipping radius, which copy versions it has mixed) is touched by no
other thread.

The step is CHOCO-SGD's consensus step on public copies (Koloskova et al. 2019) with
PipeMare-annealed staleness weights (Yang et al. 2021) and ClippedGossip's self-centred
clipping (He, Karimireddy & Jaggi 2022): x += Σ_j λ_j · clip(x̂_j − x̂_i, ρ), where a copy
beyond ρ pulls ρ·(ρ/‖d‖)^(p − 1) (`GossipConfig.clip_power`). Staleness is counted from our own
last publish (`GossipConfig.staleness_relative`): the difference compares two public copies.

The weights form one row of a mixing matrix fixed in advance: with m pulls per publish each
copy weighs γ·s(τ)·2/(1 + m), so m fresh dense copies at γ = 0.5 give the exact mean of the
m + 1 models (γ = 0.5 and m = 1 is a full pair average), and the weights of one publish
period never add up to more than m such shares, however the copies happen to arrive.
Only copies of partners this peer chose pull (`GossipConfig.pull_only`); see docs/mixing.md.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch

from async_opt import MixChange, difference, mix_diffs, parse_staleness, pull_scale, safe_distances
from peer.core.gossip_config import GossipConfig
from peer.core.view import CopyView, MixView


@dataclass
class MixReport:
    """What one mix did, for metrics (the caller records them; the mixer has no sinks)."""

    mixed: int = 0
    staleness_steps: list[float] = field(default_factory=list)
    distances: dict[bytes, float] = field(default_factory=dict)
    radius: float | None = None
    clipped: int = 0
    """Copies whose pull was shortened to the radius."""


class Mixer:
    """Decides λ_j for every neighbour copy with news and applies the mixing step."""

    def __init__(self, cfg: GossipConfig, pulls: int = 1) -> None:
        """`pulls`: exchanges this peer starts per publish (`SessionConfig.pulls_per_publish`)."""
        if pulls < 1:
            raise ValueError(f"pulls per publish must be >= 1, got {pulls}")
        self.cfg = cfg
        self.share = 2.0 / (1 + pulls)
        """What one copy weighs against a pair average's: m + 1 models averaged alike."""
        self.pulls = pulls
        self.schedule = parse_staleness(cfg.resolved_staleness)
        self.radius = cfg.clip_radius()
        self.step_seconds = 0.0
        """EMA of wall time per local step: turns a copy's age in seconds into local steps."""
        self._last_boundary: float | None = None
        self._mixed_version: dict[bytes, int] = {}
        self._period_of: tuple[weakref.ref, int] | None = None
        """Our public copy x̂_i of the current publish period (`_spent` is within it) and its
        version (it is written in place at a publish), weakly: a strong reference would keep an old
        parameter-sized copy alive for a whole period."""
        self._spent: dict[bytes, float] = {}
        """Weight already given to each neighbour since our last publish."""
        self._spent_total = 0.0
        """Weight given to all neighbours together since our last publish."""
        self._weights: dict[bytes, float] = {}
        """Each neighbour's weight since our last publish, times its clip scale."""

    def observe_boundary(self, now: float) -> None:
        """Record that a step ended at `now` (feeds the step-time estimate)."""
        if self._last_boundary is not None:
            dt = now - self._last_boundary
            self.step_seconds = dt if self.step_seconds == 0 else 0.9 * self.step_seconds + 0.1 * dt
        self._last_boundary = now

    def _version(self, c: CopyView) -> int:
        """The version of `c` that may move us: as of our latest pull of it when pulls only."""
        return c.pulled if self.cfg.pull_only else c.version

    def end_period(self, view: MixView) -> list[float] | None:
        """When we published since the last call (`view` holds a new x̂_i), start a new period and
        return the weights each neighbour's pulls got in the one that ended (clipping included):
        the mixing row the step-size rule measures (`async_opt.step_scale`). None otherwise."""
        if self._period_of is not None and self._period_of[0]() is view.public and self._period_of[1] == view.public_version:
            return None
        ended = None if self._period_of is None else list(self._weights.values())
        self._period_of = (weakref.ref(view.public), view.public_version)
        self._spent, self._spent_total, self._weights = {}, 0.0, {}
        return ended

    def has_news(self, view: MixView) -> bool:
        """Whether `view` holds a copy version not mixed yet that may be read now (cheap: no tensor work)."""
        return any(self._fresh(view, c) for c in view.copies)

    def _fresh(self, view: MixView, c: CopyView) -> bool:
        """`c` carries a version not mixed yet, and neither it nor x̂_i is being written."""
        return bool(self._version(c)) and self._mixed_version.get(c.key) != self._version(c) and view.mixable(c)

    def staleness_steps(self, published_at: float, reference: float) -> float:
        """Our local steps from the copy's publication to `reference`, as PipeMare measures delay.

        `reference` is our own last publish (`GossipConfig.staleness_relative`) or now. A fast
        peer therefore discounts a slow link more than a slow peer does. Before the step time
        is known it is 0.
        """
        if self.step_seconds <= 0:
            return 0.0
        return max(0.0, reference - published_at) / self.step_seconds

    def mix(self, x: torch.Tensor | None, view: MixView, k: int, now: float, period_steps: int = 1
            ) -> tuple[torch.Tensor, MixReport]:
        """Return the mixed parameters (a new tensor; `x` is not modified) and what was done.

        `period_steps`: our steps per publish (`peer.core.cadence.PublishPeriod`); with
        `GossipConfig.per_period` a copy's staleness is counted in such periods, and the rate
        follows the codec sent at that period (`GossipConfig.rate_at_period`).

        With `x=None` it returns the change instead, Σ_j λ_j · clip(x̂_j − x̂_i, ρ), for
        trainers that add it to their parameters in place: built a cache-sized piece at a time
        (`async_opt.mix_delta_of_copies`), so the change is the only parameter-sized tensor
        allocated, and the distances come with the view where the node worker measured them.

        Distances fall back to float64 when float32 overflows, so a copy far out of range still
        has a finite distance and is clipped rather than passed through.
        """
        pulls, rho, report = self._weigh(view, k, now, period_steps)
        if not pulls:
            return (torch.zeros_like(view.public) if x is None else x), report
        if x is not None:
            diffs = [(difference(x_hat, view.public), lam, distance) for x_hat, lam, distance in pulls]
            return mix_diffs(x, diffs, rho, self.cfg.clip_power, per_copy=True), report
        change = MixChange(view.public, pulls, rho, self.cfg.clip_power)
        return (change.whole() if change.moves else torch.zeros_like(view.public)), report

    def change(self, view: MixView, k: int, now: float, period_steps: int = 1) -> tuple[MixChange | None, MixReport]:
        """As `mix(None, …)`, the change unbuilt: a trainer adds it a parameter tensor at a time
        (`MixChange.piece`), so no parameter-sized float32 change is allocated. None: nothing mixed."""
        pulls, rho, report = self._weigh(view, k, now, period_steps)
        change = MixChange(view.public, pulls, rho, self.cfg.clip_power) if pulls else None
        return (change if change is not None and change.moves else None), report

    def _weigh(self, view: MixView, k: int, now: float, period_steps: int
               ) -> tuple[list[tuple[torch.Tensor, float, float]], float | None, MixReport]:
        """The copies this boundary pulls, (x̂_j, λ_j, distance), the radius and the report."""
        report = MixReport()
        live = {c.key for c in view.copies}
        fresh = [c for c in view.copies if self._fresh(view, c)]
        news = list(zip(fresh, self._distances(view, fresh)))
        for c, distance in news:
            self.radius.observe(c.key, distance)
            report.distances[c.key] = distance
        for key in [key for key in self._mixed_version if key not in live]:
            del self._mixed_version[key]  # forgotten neighbours: keep these maps bounded
        self.radius.keep_only(live)
        self.end_period(view)
        if not news:
            return [], None, report
        rho = self.radius.radius(view.public_norm, view.public_moves) if self.cfg.clip else None
        pulls: list[tuple[torch.Tensor, float, float]] = []
        reference, unit = now, (max(1, period_steps) if self.cfg.per_period else 1)
        rate = self.cfg.rate_at_period(unit, view.public.numel())
        if self.cfg.staleness_relative:  # before our first publish x̂_i is the start: nothing is older
            # min(…, now): a publish stamped later than this boundary would make every copy stale.
            reference = -math.inf if view.public_published_at is None else min(view.public_published_at, now)
        for c, distance in news:
            tau = self.staleness_steps(c.published_at, reference)
            # One consensus step per publish of ours: x̂_i stays put until then, so every newer
            # version of x̂_j − x̂_i would pull the whole difference again (a straggler receiving
            # four versions per period would overshoot 4·γ). A newer version adds only what its
            # own rate exceeds the weight that neighbour already got in this period.
            # The period's budget: m shares at the fresh rate, so copies pulled late in one period
            # and early in the next cannot add up to more than the mean of the m + 1 models.
            budget = min(1.0, self.pulls * self.share * rate * self.schedule.lam(0.0, max(k, 0))) - self._spent_total
            if budget <= 0.0:
                continue  # the period is spent: this version pulls in the next one
            self._mixed_version[c.key] = self._version(c)
            weight = self.schedule.lam(tau / unit, max(k, 0))
            lam = min(self.share * rate * weight - self._spent.get(c.key, 0.0), budget)
            if lam <= 0.0:
                continue
            self._spent[c.key] = self._spent.get(c.key, 0.0) + lam
            self._spent_total += lam
            scale = pull_scale(distance, rho, self.cfg.clip_power)
            self._weights[c.key] = self._weights.get(c.key, 0.0) + lam * scale
            report.staleness_steps.append(tau)  # of the copies that pull: a copy weighed 0 is not mixed
            report.clipped += rho is not None and not distance <= rho
            pulls.append((c.x_hat, lam, distance))
        report.mixed, report.radius = len(pulls), rho
        return pulls, rho, report

    @staticmethod
    def _distances(view: MixView, copies: list[CopyView]) -> list[float]:
        """||x̂_j − x̂_i|| of each copy: as the node worker measured it for this view where it did,
        the others in one pass over x̂_i without a parameter-sized temporary."""
        missing = [c for c in copies if c.distance is None]
        measured = dict(zip((c.key for c in missing), safe_distances([c.x_hat for c in missing], view.public)
                            if missing else []))
        return [c.distance if c.distance is not None else measured[c.key] for c in copies]
