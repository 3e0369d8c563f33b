"""Gossip mixing: self-centred clipping and the mixing step.

The mixing step is the consensus step of CHOCO-SGD (Koloskova et al. 2019) taken on
public copies, with each neighbour's pull self-centred-clipped as in ClippedGossip
(He, Karimireddy & Jaggi 2022) and weighted by a staleness rate (see ``staleness``).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from typing import Sequence

import torch
from torch import Tensor

__all__ = ["clip", "safe_norm", "safe_distances",
           "AdaptiveRadius", "NeighbourRadius", "mix_step", "mix_diffs", "mix_delta", "mix_delta_of_copies",
           "check_power", "pull_scale", "consensus_distance", "difference"]


def safe_norm(v: Tensor) -> float:
    """``||v||`` without overflow, for ClippedGossip's distances (He, Karimireddy & Jaggi 2022):
    float32 first (one pass), float64 only when that overflowed.

    A vector of finite entries always gets a finite norm; one with NaN or ±inf gets a
    non-finite one.
    """
    # a half-width copy (`PublicCopy(dtype=torch.bfloat16)`) is summed in float32: its own 8-bit
    # mantissa would round the norm to two or three digits. A piece at a time: widening the whole
    # copy would allocate a float32 copy of the model
    piece = piece_for(v)
    if v.dtype in HALF_WIDTH and v.numel() > piece:
        flat = v.detach().reshape(-1)
        squares = sum(float(torch.linalg.vector_norm(flat[i:i + piece], dtype=torch.float32)) ** 2
                      for i in range(0, flat.numel(), piece))
        n = math.sqrt(squares)
    else:
        n = float(torch.linalg.vector_norm(v, dtype=torch.float32) if v.dtype in HALF_WIDTH else torch.linalg.vector_norm(v))
    if math.isfinite(n):
        return n
    if v.dtype in HALF_WIDTH and v.numel() > piece:  # a float64 copy would be four of the vector
        flat = v.detach().reshape(-1)
        return math.sqrt(sum(float(torch.linalg.vector_norm(flat[i:i + piece], dtype=torch.float64)) ** 2
                             for i in range(0, flat.numel(), piece)))
    return float(torch.linalg.vector_norm(v.double()))


HALF_WIDTH = (torch.bfloat16, torch.float16)
"""Dtypes whose arithmetic rounds to too few bits for a copy's differences and norms."""


def difference(a: Tensor, b: Tensor) -> Tensor:
    """``a − b`` as a new tensor in float32 at least: CHOCO-SGD's ``x̂_j − x̂_i`` (Koloskova et al.
    2019) between two bfloat16 copies is a number float32 holds exactly, and bfloat16 arithmetic
    would round to 8 bits."""
    if a.dtype not in HALF_WIDTH and b.dtype not in HALF_WIDTH:
        return a - b
    out = a.to(torch.promote_types(a.dtype, torch.float32), copy=True)
    return out.sub_(b)


PIECE = 1 << 17
"""Entries per piece of the piecewise passes over parameter-sized vectors (`safe_distances`,
`async_opt.averaging.swarm_estimate`): 512 KiB of each stays in a core's cache while the piece
of every other vector is read, so each vector is read from memory once."""
DEVICE_PIECE = 1 << 24
"""Entries per piece off the CPU (a node on the trainer's GPU, `peer.core.placement`): there each
piece costs kernel launches and, where a norm is read, a wait for the device, so pieces are long
(64 MiB of float32, small beside a GPU's memory): a pass over a large model is a few hundred
launches, not tens of thousands."""


def piece_for(t: Tensor) -> int:
    """The piece of a piecewise pass over `t`: `PIECE` on the CPU, `DEVICE_PIECE` elsewhere."""
    return PIECE if t.device.type == "cpu" else DEVICE_PIECE


def safe_distances(vectors: Sequence[Tensor], reference: Tensor) -> list[float]:
    """``[safe_norm(v - reference) for v in vectors]``, ClippedGossip's distances (He,
    Karimireddy & Jaggi 2022), without a temporary the size of `reference` and reading it once:
    the differences are taken a `PIECE` at a time.

    Each piece's norm overflows to float64 as `safe_norm` does; a NaN or ±inf entry gives a
    non-finite distance.
    """
    for v in vectors:
        if v.shape != reference.shape:
            raise ValueError(f"distance between shapes {tuple(v.shape)} and {tuple(reference.shape)}")
    ref, flat = reference.detach().reshape(-1), [v.detach().reshape(-1) for v in vectors]
    n, step = ref.numel(), piece_for(ref)
    if n <= step:
        return [safe_norm(difference(v, ref)) for v in flat]
    dtype = functools.reduce(torch.promote_types, (v.dtype for v in flat), torch.promote_types(ref.dtype, torch.float32))
    buf, totals = torch.empty(step, dtype=dtype, device=ref.device), [0.0] * len(flat)
    for start in range(0, n, step):
        part = slice(start, start + step)
        piece = buf[:ref[part].numel()]
        for i, v in enumerate(flat):
            _sub_into(piece, v[part], ref[part])
            totals[i] += safe_norm(piece) ** 2
    return [math.sqrt(t) for t in totals]


def clip(v: Tensor, rho: float | None, norm: float | None = None) -> Tensor:
    """Self-centred clipping of ClippedGossip (He, Karimireddy & Jaggi 2022): ``v * min(1, rho / ||v||)``.

    ``||v||`` is the Euclidean norm of the whole tensor (pass it as ``norm`` when already
    known). ``rho=None`` or ``rho=inf`` means no clipping. A zero vector is returned as
    zeros. When ``rho`` is finite, a ``v`` with non-finite entries has no usable direction
    and is clipped to zeros, so a neighbour that sends inf/NaN cannot move the receiver.
    Always returns a new tensor.
    """
    if rho is None or rho == math.inf:
        return v.clone()
    if not (rho >= 0.0):
        raise ValueError(f"clip radius rho must be >= 0 or None, got {rho!r}")
    norm = safe_norm(v) if norm is None else float(norm)
    if not math.isfinite(norm):
        return torch.zeros_like(v)
    if norm <= rho:
        return v.clone()
    return v * (rho / norm)


class AdaptiveRadius:
    """Clipping radius from a running quantile of recent neighbour distances ``||x̂_j - x̂_i||``.

    ClippedGossip (He, Karimireddy & Jaggi 2022) picks the clipping radius from the
    distances to the neighbours so that only the farthest fraction is clipped; this keeps
    the last ``window`` distances and uses ``multiplier * quantile(q)`` (linear
    interpolation between order statistics, as ``numpy.quantile``'s default). Set ``q``
    below ``1 - (largest expected fraction of Byzantine neighbours)``.

    ``radius`` is ``inf`` (no clipping) until ``min_samples`` distances have been seen.
    Non-finite distances are not recorded (they would poison the quantile).

    The textbook form, kept for the synchronous toy studies in the tests. Peers use
    `NeighbourRadius` instead: over a window of observations a neighbour that sends often
    owns the window and can grow the radius step by step, and the radius is ``inf`` at first.
    """

    def __init__(self, window: int = 64, q: float = 0.5, multiplier: float = 1.0, min_samples: int = 4) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not (0.0 <= q <= 1.0):
            raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
        if not (multiplier > 0.0 and math.isfinite(multiplier)):
            raise ValueError(f"multiplier must be finite and > 0, got {multiplier!r}")
        if not (1 <= min_samples <= window):
            raise ValueError(f"min_samples must be in [1, window], got {min_samples}")
        self.window = window
        self.q = q
        self.multiplier = multiplier
        self.min_samples = min_samples
        self._d: deque[float] = deque(maxlen=window)

    def observe(self, d: float) -> None:
        """Record one neighbour distance (ignored if negative or non-finite)."""
        d = float(d)
        if math.isfinite(d) and d >= 0.0:
            self._d.append(d)

    @property
    def warm(self) -> bool:
        """True once ``min_samples`` distances are in the window."""
        return len(self._d) >= self.min_samples

    @property
    def radius(self) -> float:
        """``multiplier * quantile_q(window)``, or ``inf`` while not warm."""
        if not self.warm:
            return math.inf
        xs = sorted(self._d)
        pos = self.q * (len(xs) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(xs) - 1)
        frac = pos - lo
        return self.multiplier * (xs[lo] + (xs[hi] - xs[lo]) * frac)


class NeighbourRadius:
    """A clipping radius no neighbour can steer: one distance per neighbour, a low quantile, a cap.

    ClippedGossip (He, Karimireddy & Jaggi 2022) takes the radius from neighbour distances.
    Taken over a window of recent observations, one neighbour that sends often owns the
    window and can grow the radius step by step. Here each neighbour holds one entry (its
    latest distance), the radius is ``multiplier`` times a low quantile of those entries
    (an order statistic, never interpolated upwards), so fewer than ``1 − q`` of the
    neighbours cannot move it past the honest ones; and it never exceeds
    ``max_relative · ||x̂_i||``, a bound from our own parameters.

    Before ``min_neighbours`` distances are known a quantile of one or two neighbours is
    theirs to set, and the cap alone lets one of them pull a sizeable share of our norm at
    every publish. There the radius is ``own_multiplier`` × the lower median of how far our
    own public copy moved at its recent publishes (``own_moves``): the distance an honest copy,
    trained by the same optimiser, moves in one publish period, which no neighbour sets on its
    own. Our move holds our mixing too, so a neighbour's pull (at most its weight λ times the
    radius) feeds back into it: while ``own_multiplier · λ < 1`` a neighbour cannot grow the
    radius past ``own_multiplier / (1 − own_multiplier · λ)`` times our training's move; past
    that, one that sits at the radius can grow it, slowly, up to the cap.
    """

    def __init__(self, q: float = 0.5, multiplier: float = 2.0, min_neighbours: int = 3,
                 max_relative: float = 0.5, own_multiplier: float = 4.0) -> None:
        if not (0.0 <= q <= 1.0):
            raise ValueError(f"quantile q must be in [0, 1], got {q!r}")
        for name, value in (("multiplier", multiplier), ("max_relative", max_relative),
                            ("own_multiplier", own_multiplier)):
            if not (value > 0.0 and math.isfinite(value)):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        if min_neighbours < 1:
            raise ValueError(f"min_neighbours must be >= 1, got {min_neighbours}")
        self.q, self.multiplier, self.min_neighbours, self.max_relative = q, multiplier, min_neighbours, max_relative
        self.own_multiplier = own_multiplier
        self._latest: dict[object, float] = {}

    def observe(self, key: object, distance: float) -> None:
        """Record a neighbour's latest distance (non-finite or negative ones are ignored)."""
        d = float(distance)
        if math.isfinite(d) and d >= 0.0:
            self._latest[key] = d

    def keep_only(self, keys: set) -> None:
        """Forget neighbours that are gone, so the statistic covers current neighbours only."""
        for key in [k for k in self._latest if k not in keys]:
            del self._latest[key]

    def radius(self, self_norm: float, own_moves: Sequence[float] | None = None) -> float:
        """The radius for a mix around parameters of norm ``self_norm`` (always finite).

        ``own_moves``: how far our public copy moved at its recent publishes (None: not known
        to this caller, and only the cap holds before ``min_neighbours``; empty: we have not
        published yet, and nothing pulls until we know how far we move)."""
        cap = self.max_relative * max(float(self_norm), 0.0)
        if not math.isfinite(cap):
            cap = 0.0
        if len(self._latest) < self.min_neighbours:
            return cap if own_moves is None else min(cap, self.own_bound(own_moves))
        xs = sorted(self._latest.values())
        return min(cap, self.multiplier * xs[math.floor(self.q * (len(xs) - 1))])

    def own_bound(self, own_moves: Sequence[float]) -> float:
        """``own_multiplier`` × the lower median of our own finite, non-negative moves (0 when none)."""
        xs = sorted(m for m in map(float, own_moves) if math.isfinite(m) and m >= 0.0)
        return self.own_multiplier * xs[(len(xs) - 1) // 2] if xs else 0.0


def mix_step(
    x: Tensor,
    x_hat_self: Tensor,
    neighbours: Sequence[tuple[Tensor, float]],
    rho: float | None,
    power: float = 1.0,
) -> Tensor:
    """CHOCO-SGD consensus step with ClippedGossip self-centred clipping.

    Returns ``x + Σ_j λ_j · clip(x̂_j − x̂_i, ρ) / |J|`` (Koloskova et al. 2019, eq. for
    ``x^{t+1}``; He, Karimireddy & Jaggi 2022 for the clipping), where ``neighbours`` is a
    sequence of ``(x̂_j, λ_j)`` and ``|J| = len(neighbours)``. Pass only neighbours with
    news: one given with ``λ_j = 0`` still counts in ``|J|``. With no neighbours, returns a
    copy of ``x``. ``x`` is never modified in place.
    """
    if x.shape != x_hat_self.shape:
        raise ValueError(f"x shape {tuple(x.shape)} does not match x_hat_self {tuple(x_hat_self.shape)}")
    diffs = []
    for idx, (x_hat_j, lam) in enumerate(neighbours):
        if x_hat_j.shape != x_hat_self.shape:
            raise ValueError(
                f"neighbour {idx}: shape {tuple(x_hat_j.shape)} does not match {tuple(x_hat_self.shape)}"
            )
        d = difference(x_hat_j, x_hat_self)
        diffs.append((d, lam, safe_norm(d) if rho is not None and rho != math.inf else 0.0))
    return mix_diffs(x, diffs, rho)


def check_power(power: float) -> float:
    """Validate a falloff power (see `_pulls`): a finite number >= 1."""
    power = float(power)
    if not (1.0 <= power < math.inf):
        raise ValueError(f"clip power must be finite and >= 1, got {power!r}")
    return power


def _pulls(diffs: Sequence[tuple[Tensor, float, float]], rho: float | None,
           power: float = 1.0, per_copy: bool = False) -> list[tuple[Tensor, float]]:
    """``(x̂_j − x̂_i, λ_j · clip scale / |J|)`` for every difference that moves x (``per_copy``:
    each λ_j is already that copy's whole weight, with no division by |J|).

    A difference longer than ``rho`` is scaled by ``(rho / ||d||) ** power``: with ``power = 1``
    it is ClippedGossip's clipping (every far copy pulls exactly ``rho``); with ``power > 1`` the
    pull redescends, ``rho · (rho / ||d||) ** (power − 1)``, as the influence of a redescending
    M-estimator does (Hampel et al. 1986): a copy far out of range barely moves x, and the most
    any copy can pull is still ``rho``, reached at the radius.
    """
    power = check_power(power)
    out = []
    for idx, (d, lam, norm) in enumerate(diffs):
        lam = float(lam)
        if not (0.0 <= lam <= 1.0):
            raise ValueError(f"neighbour {idx}: mixing rate must be in [0, 1], got {lam!r}")
        scale = pull_scale(norm, rho, power)
        if lam == 0.0 or scale == 0.0:
            continue
        out.append((d, lam * scale / (1 if per_copy else len(diffs))))
    return out


def pull_scale(norm: float, rho: float | None, power: float = 1.0) -> float:
    """What share of a difference of length `norm` pulls (`_pulls`): 1 within `rho` (or with no
    radius), ``(rho / norm) ** power`` beyond it, 0 for a non-finite length (no usable direction).
    ClippedGossip's clipping (He, Karimireddy & Jaggi 2022) at ``power = 1``."""
    if rho is None or rho == math.inf:
        return 1.0
    if not math.isfinite(norm):
        return 0.0
    return 1.0 if norm <= rho else (rho / norm) ** power


def mix_diffs(x: Tensor, diffs: Sequence[tuple[Tensor, float, float]], rho: float | None,
              power: float = 1.0, per_copy: bool = False) -> Tensor:
    """`mix_step` from precomputed differences: ``diffs`` holds ``(x̂_j − x̂_i, λ_j, ||x̂_j − x̂_i||)``.

    The same CHOCO-SGD consensus step with ClippedGossip clipping (Koloskova et al. 2019;
    He, Karimireddy & Jaggi 2022); a caller that already computed the differences and their
    norms (to update a clipping radius) saves a pass over every neighbour copy. ``power`` > 1
    makes far copies' pulls redescend (see `_pulls`); ``per_copy`` takes each λ_j as that copy's
    whole weight instead of dividing by |J| (a weight matrix row fixed in advance, whatever
    number of copies happen to arrive at one step boundary).
    """
    out = x.detach().clone()
    for d, weight in _pulls(diffs, rho, power, per_copy):
        out.add_(d.to(out.dtype), alpha=weight)
    return out


def mix_delta(diffs: Sequence[tuple[Tensor, float, float]], rho: float | None,
              power: float = 1.0, per_copy: bool = False) -> Tensor | None:
    """The change `mix_diffs` would add to x, ``Σ_j λ_j · clip(x̂_j − x̂_i, ρ) / |J|`` (the CHOCO-SGD
    consensus step of Koloskova et al. 2019, clipped as in He, Karimireddy & Jaggi 2022), or
    None when nothing moves x.

    For a trainer that adds the change to its parameters in place: the first difference is
    scaled in place and the others added to it, so no parameter-sized buffer is allocated.
    The differences must be the caller's own temporaries: they are overwritten.
    """
    pulls = _pulls(diffs, rho, power, per_copy)
    if not pulls:
        return None
    (first, weight), rest = pulls[0], pulls[1:]
    out = first.mul_(weight)
    for d, w in rest:
        out.add_(d.to(out.dtype), alpha=w)
    return out


def _sub_into(out: Tensor, a: Tensor, b: Tensor) -> None:
    """out = a − b computed in out's dtype (float32 for half-width copies: no rounding to 8 bits)."""
    if a.dtype == out.dtype and b.dtype == out.dtype:
        torch.sub(a, b, out=out)
    else:
        out.copy_(a)
        out.sub_(b)


def consensus_distance(xs: Sequence[Tensor]) -> float:
    """Mean squared distance to the average, ``(1/n) Σ_i ||x_i − x̄||²`` (the consensus error of Koloskova et al. 2019)."""
    if len(xs) == 0:
        raise ValueError("consensus_distance needs at least one tensor")
    stacked = torch.stack([x.detach().double().reshape(-1) for x in xs])
    return float(((stacked - stacked.mean(0)) ** 2).sum(1).mean())
