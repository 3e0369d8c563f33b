"""The weights a peer hands its user: a power-function EMA of its estimate of the swarm's mean.

Why not the live parameters: on a noisy workload most of a replica's loss is the noise of its
last few optimiser steps, and no mixing every few steps removes it (the head-to-head MLP,
benchmarks/averaging_probe.py: a lone replica scores about twice what its own recent average
scores; docs/benchmarks/replica-loss.md). Diffusion and flow-matching models are therefore sampled from
averaged weights. A gossiping peer can average over its neighbours as well as over time: it
holds their public copies, so its estimate of the swarm's mean is

    x̃ = x + Σ_j clip(x̂_j − x̂_i, ρ) / (1 + m)

over the m copies it holds: the mean of x and of each x̂_j + (x − x̂_i), every neighbour's copy
carried forward by our own unpublished residual, since public copies lag the parameters they
track (top-k sends a tenth of a change per publish). No copy moves x̃ by more than ρ / (1 + m),
with ρ the mixer's radius (a low quantile of the neighbours' distances, capped by our own norm:
a bound no neighbour sets). The plain mean of the copies, (x + Σ_j x̂_j) / (1 + m), would
inherit their lag, which is worst early while the copies trail far behind
(docs/benchmarks/replica-loss.md#what-a-replicas-loss-is-made-of).

A peer far behind its neighbours (a slow machine among fast ones) weighs its own parameters by
how far behind it is: with r the neighbours' lower-median step over ours (at least 1), x
counts 1/(1 + m·r) and each copy r/(1 + m·r), and the copies carry only c = 1/r of our
residual forward. At r = 1 both rules are the estimate above. A straggler's residual is
mostly the pulls it took towards those very copies (its own steps are few), so carried in
full it counts them twice; and its own lagging parameters would otherwise weigh as much as
any of the swarm's. With both rules a straggler's averaged weights score close to the fast
replicas' (`benchmarks/averaging_probe.py --straggler`;
docs/benchmarks/head-to-head.md#quiet-machine-4-processes-per-arm-live-and-averaged-weights-the-current-figures).
No copy's share ever exceeds 1/m, so no copy moves x̃ by
more than ρ/m, and only a majority of at least two neighbours can raise r.

The time average is EDM2's power-function EMA (Karras et al. 2024, "Analyzing and Improving
the Training Dynamics of Diffusion Models", section 3.1): at step t, β_t = (1 − 1/t)^(γ+1), so
the average covers a fixed fraction of training so far, σ_rel (its relative standard
deviation), for a run of 300 steps or of 300,000 alike. Sampled every few steps, the betas of
the steps in between multiply to (t_prev / t)^(γ+1), which `PowerEma` uses.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor

from .mixing import HALF_WIDTH, piece_for, pull_scale
from .packed_float import PackedFloats

SIGMA_REL_MAX = math.sqrt(1.0 / 12.0)
"""σ_rel at γ = 0 (a uniform average of all of training): the widest power-function EMA."""


def sigma_rel_of(gamma: float) -> float:
    """The relative standard deviation of the power-function EMA profile with exponent γ."""
    return math.sqrt((gamma + 1.0) / ((gamma + 2.0) ** 2 * (gamma + 3.0)))


def power_ema_exponent(sigma_rel: float) -> float:
    """The exponent γ whose power-function EMA has relative width `sigma_rel` (0 < σ_rel ≤ √(1/12))."""
    if not (0.0 < sigma_rel <= SIGMA_REL_MAX):
        raise ValueError(f"sigma_rel must be in (0, {SIGMA_REL_MAX:.4f}], got {sigma_rel!r}")
    lo, hi = 0.0, 1.0
    while sigma_rel_of(hi) > sigma_rel:  # σ_rel falls as γ grows
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if sigma_rel_of(mid) > sigma_rel else (lo, mid)
    return 0.5 * (lo + hi)


SAMPLES_PER_WIDTH = 8
"""At least this many samples per σ_rel·t steps, the average's width at step t: a gap that is a
small fraction of the window loses nothing the window holds."""
MAX_SAMPLE_GAP = 4
"""Never more than this many steps between samples, however wide the window: below the span over
which an optimiser's consecutive steps stay correlated (Adam's momentum: ~10 steps), a sample
every few steps sees nearly all the noise the average is there to remove, while a longer gap would
average fewer independent samples. Evidence: docs/benchmarks/protocol-cpu.md#the-averaged-weights-sampled-every-few-steps."""


class PowerEma:
    """A power-function EMA sampled at arbitrary steps.

    float32 (the default): `value` is replaced, never written in place, so readers on other
    threads may keep the tensor they got (an update builds a new one). `packed`: `value` is a
    `PackedFloats` (three bytes a value, `async_opt.packed_float` says why that is enough) updated
    in place a piece at a time, with no parameter-sized temporary; readers take a copy with
    `read`. `due` says when a sample is worth its pass over the parameters (`SAMPLES_PER_WIDTH`,
    `MAX_SAMPLE_GAP`); `update` takes whatever it is given.
    """

    def __init__(self, sigma_rel: float, *, packed: bool = False) -> None:
        self.sigma_rel = float(sigma_rel)
        self.gamma = power_ema_exponent(self.sigma_rel)
        self.packed = packed
        self.value: Tensor | PackedFloats | None = None
        self.step = 0
        """The step of the newest sample."""

    def beta(self, step: int) -> float:
        """The weight the current average keeps when a sample taken at `step` arrives."""
        if self.value is None or step <= 0:
            return 0.0
        return (min(self.step, step) / step) ** (self.gamma + 1.0)

    def sample_gap(self, step: int) -> int:
        """The steps to leave between samples at `step`: σ_rel·step / SAMPLES_PER_WIDTH, within
        [1, MAX_SAMPLE_GAP]."""
        return max(1, min(MAX_SAMPLE_GAP, int(self.sigma_rel * step / SAMPLES_PER_WIDTH)))

    def due(self, step: int) -> bool:
        """Whether to sample at `step`: always before the first sample, then once `sample_gap`
        steps have passed since the newest one."""
        return self.value is None or int(step) - self.step >= self.sample_gap(int(step))

    def update(self, sample: Tensor | SwarmEstimate, step: int, *, handed_over: bool = False,
               generator: torch.Generator | None = None) -> Tensor | PackedFloats:
        """Fold in `sample` taken at `step`. A sample at or before the newest one's step has β = 1
        and is ignored (nothing new happened since). A packed average may be given a
        `SwarmEstimate` (read a piece at a time; a float32 average builds it whole first).

        `handed_over`: the caller will not use `sample` again (a float32 tensor of its own), so
        the new float32 average is built in it instead of in a fresh parameter-sized tensor.
        `generator` (on the average's device) rounds a packed average's low byte; required then."""
        beta = self.beta(int(step))
        if self.value is None or beta == 0.0:
            whole = sample if isinstance(sample, Tensor) else swarm_estimate_of(sample)
            self.reset(whole, step, handed_over=handed_over or whole is not sample)
            return self.value  # type: ignore[return-value]
        if beta < 1.0:
            if isinstance(self.value, PackedFloats):
                if generator is None:
                    raise ValueError("a packed average rounds stochastically: pass a generator")
                flat = sample.detach().reshape(-1) if isinstance(sample, Tensor) else None
                pieces = sample.piece if isinstance(sample, SwarmEstimate) else (lambda part: flat[part])
                self.value.lerp_(pieces, 1.0 - beta, generator)
            else:
                own = not isinstance(sample, Tensor) or (handed_over and sample.dtype == torch.float32)
                sample = (sample if isinstance(sample, Tensor) else swarm_estimate_of(sample)).detach().to(torch.float32)
                self.value = torch.lerp(self.value, sample, 1.0 - beta, out=sample if own else None)
        self.step = max(self.step, int(step))
        return self.value

    def reset(self, sample: Tensor, step: int, *, handed_over: bool = False) -> None:
        """Start again from `sample` as the average of everything up to `step` (after a join)."""
        if self.packed:
            self.value = PackedFloats(sample)
        else:
            own = handed_over and sample.dtype == torch.float32
            self.value = sample.detach() if own else sample.detach().to(torch.float32).clone()
        self.step = int(step)

    def read(self, attempts: int = 8, pause: Callable[[], None] | None = None) -> Tensor | None:
        """The average as a float32 tensor not written again, from any thread (a packed one's copy:
        `PackedFloats.read` with `attempts` and `pause`); None before the first sample, or when a
        packed average's in-place update overlapped every attempt."""
        value = self.value
        return value.read(attempts, pause) if isinstance(value, PackedFloats) else value


def progress_ratio(own_step: int, neighbour_steps: Sequence[int]) -> float:
    """How far ahead the neighbours are: the lower median of their steps over ours, never below 1
    (1.0 with fewer than two neighbours).

    The lower median, so only a majority of neighbours can raise it, and never one neighbour
    alone: a lone neighbour's claim would set its own weight (with two, the lower median is the
    smaller claim). Never below 1: the copies we hold were published up to a period ago, so
    their steps trail ours even in a swarm of equal peers, and a peer ahead of its neighbours
    keeps counting them as much as itself. Our own step counts as at least 1.
    """
    if len(neighbour_steps) < 2:
        return 1.0
    steps = sorted(int(s) for s in neighbour_steps)
    return max(1.0, steps[(len(steps) - 1) // 2] / max(int(own_step), 1))


def swarm_estimate(x: Tensor, public: Tensor, copies: Sequence[tuple[Tensor, float]], rho: float | None,
                   power: float = 1.0, progress: float = 1.0) -> Tensor:
    """x̃ = x + r·Σ_j clip(x̂_j − x̂_i, ρ) / (1 + m·r) − (1 − c)·S·(x − x̂_i): our parameters moved
    by a consensus step over the m neighbour copies, r = `progress` (`progress_ratio`; 1: every
    model counts alike), each copy's share bounded by ρ·r / (1 + m·r) < ρ / m; the copies carry
    c = min(1, 1/r) of our residual x − x̂_i forward (S: the copies' shares together; module
    docstring).

    `copies` holds each copy x̂_j with its distance ||x̂_j − x̂_i|| (the caller measured it, to
    feed its radius too). A copy farther than ρ is shortened as the mixer shortens it
    (`async_opt.mixing.pull_scale`); one whose distance is not finite adds nothing. Built a
    cache-sized piece at a time (`SwarmEstimate`), so the only parameter-sized tensor allocated is
    the result and each vector is read once, however many copies there are. Returns a new tensor.
    """
    return swarm_estimate_of(SwarmEstimate(x, public, copies, rho, power, progress))


def swarm_estimate_of(estimate: "SwarmEstimate") -> Tensor:
    """The whole of a piecewise estimate as one new float32 tensor."""
    out = torch.empty(estimate.x.shape, dtype=torch.float32, device=estimate.x.device)
    flat_out, step = out.view(-1), piece_for(out)
    for start in range(0, flat_out.numel(), step):
        part = slice(start, start + step)
        estimate.piece(part, out=flat_out[part])
    return out


class SwarmEstimate:
    """`swarm_estimate` one slice at a time: (1 − (1 − c)·S)·x + Σ_j s_j·x̂_j − c·S·x̂_i, so that a
    packed average (`PowerEma(packed=True)`) folds it in without a parameter-sized temporary."""

    def __init__(self, x: Tensor, public: Tensor, copies: Sequence[tuple[Tensor, float]], rho: float | None,
                 power: float = 1.0, progress: float = 1.0) -> None:
        if not (0.0 <= progress < math.inf):
            raise ValueError(f"progress ratio must be finite and >= 0, got {progress!r}")
        m = len(copies)
        shares = []
        for idx, (c, norm) in enumerate(copies):
            if c.shape != public.shape:
                raise ValueError(f"copy {idx}: shape {tuple(c.shape)} does not match {tuple(public.shape)}")
            shares.append(pull_scale(norm, rho, power) * progress / (1.0 + m * progress))
        total, self.carry = sum(shares), min(1.0, 1.0 / progress) if progress > 0 else 1.0
        self.total = max(0.0, total)
        # a half-width x (a bfloat16 parameter copy) is widened a piece at a time, never whole
        self.x = x.detach() if x.dtype in HALF_WIDTH else x.detach().to(torch.float32)
        self.scale = 1.0 - (1.0 - self.carry) * self.total  # x·(1 − S) + carry·S·(x − x̂_i), one scaling of x
        self._flat_x, self._public = self.x.reshape(-1), public.detach().reshape(-1)
        self._pulls = [(c.detach().reshape(-1), share) for (c, _), share in zip(copies, shares) if share > 0.0]

    def numel(self) -> int:
        return self._flat_x.numel()

    def piece(self, part: slice, out: Tensor | None = None) -> Tensor:
        """The estimate's values in `part` of the flattened parameters (into `out` when given)."""
        if self.total <= 0.0:
            return self._flat_x[part].to(torch.float32, copy=True) if out is None else out.copy_(self._flat_x[part])
        piece = torch.mul(self._flat_x[part].to(torch.float32), self.scale, out=out)
        for c, share in self._pulls:
            piece.add_(c[part], alpha=share)
        return piece.add_(self._public[part], alpha=-self.carry * self.total)
