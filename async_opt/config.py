"""One validated config for the gossip mathematics (the defaults of DESIGN.md section 4)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .mixing import AdaptiveRadius
from .staleness import StalenessSchedule, parse_staleness

__all__ = ["MixConfig"]


@dataclass(frozen=True)
class MixConfig:
    """Settings of the mixing step: CHOCO-SGD consensus (Koloskova et al. 2019) with
    PipeMare-annealed staleness weights (Yang et al. 2021), ClippedGossip self-centred
    clipping (He, Karimireddy & Jaggi 2022) and optional PipeMare weight prediction.
    """

    staleness: str = "pipemare:K=2000,p_min=0,gamma=0.5,tau_max=64"
    """Staleness spec for :func:`async_opt.staleness.parse_staleness`."""
    clip: bool = True
    """Clip each neighbour's pull ``x̂_j − x̂_i`` to an adaptive radius."""
    clip_window: int = 64
    """How many recent neighbour distances the radius quantile is taken over."""
    clip_quantile: float = 0.5
    """Quantile of recent distances used as radius; keep below 1 − (Byzantine fraction)."""
    clip_multiplier: float = 1.0
    """Radius = multiplier × quantile."""
    clip_min_samples: int = 4
    """Distances to see before clipping starts (radius is inf until then)."""
    predict: bool = False
    """PipeMare weight prediction ``x̂_j + min(τ, τ_c) v_j`` (off by default)."""
    tau_c: float = 4.0
    """Cap on the prediction horizon, in local steps."""
    velocity_beta: float = 0.9
    """EMA factor of a neighbour copy's velocity."""

    def __post_init__(self) -> None:
        self.build_staleness()  # raises ValueError naming the bad part
        self.build_radius()
        if not (self.tau_c >= 0.0 and math.isfinite(self.tau_c)):
            raise ValueError(f"tau_c must be finite and >= 0, got {self.tau_c!r}")
        if not (0.0 <= self.velocity_beta < 1.0):
            raise ValueError(f"velocity_beta must be in [0, 1), got {self.velocity_beta!r}")

    def build_staleness(self) -> StalenessSchedule:
        """Parse :attr:`staleness` into a :class:`StalenessSchedule`."""
        return parse_staleness(self.staleness)

    def build_radius(self) -> AdaptiveRadius:
        """A fresh :class:`AdaptiveRadius` with these settings (one per peer)."""
        return AdaptiveRadius(
            window=self.clip_window,
            q=self.clip_quantile,
            multiplier=self.clip_multiplier,
            min_samples=self.clip_min_samples,
        )
