"""Staleness weights: how much a neighbour's information counts, given how old it is.

Every function here works on ``tau``, the staleness in *local* steps (a float >= 0),
and ``k``, the receiver's local step count (an int >= 0). A weight is a number in
``[0, 1]``; the mixing rate actually used is ``lam = gamma * weight``, and zero once
``tau`` passes ``tau_max``.

Policies:

* :class:`Constant` -- no discount (AD-PSGD, Lian et al. 2018, mixes whatever it has).
* :class:`Polynomial` and :class:`Hinge` -- the staleness functions of FedAsync
  (Xie, Koyejo & Gupta 2019, "Asynchronous Federated Optimization", section 5.2).
* :class:`Exponential` -- an exponential discount, ``exp(-rate * tau)``.
* :class:`PipeMare` -- the delay-annealed discount of PipeMare (Yang et al. 2021):
  ``(1 + tau) ** -p_k`` with ``p_k = max(p_min, 1 - k / K)``, so stale information is
  distrusted early in training and trusted more and more as training settles.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "StalenessPolicy",
    "Constant",
    "Polynomial",
    "Hinge",
    "Exponential",
    "PipeMare",
    "StalenessSchedule",
    "parse_staleness",
    "pair_lambda",
]


def _check_tau_k(tau: float, k: int) -> None:
    if not (isinstance(tau, numbers.Real) and tau >= 0.0):  # False for NaN
        raise ValueError(f"staleness tau must be a number >= 0, got {tau!r}")
    if k < 0:
        raise ValueError(f"local step k must be >= 0, got {k!r}")


@runtime_checkable
class StalenessPolicy(Protocol):
    """A staleness discount ``weight(tau, k) -> [0, 1]``, non-increasing in ``tau``.

    The interface of the staleness functions ``s(t - tau)`` of FedAsync (Xie et al. 2019)
    extended with the local step ``k`` so that PipeMare-style annealing (Yang et al. 2021)
    fits the same shape.
    """

    def weight(self, tau: float, k: int) -> float:
        """Weight in ``[0, 1]`` for information ``tau`` local steps old, at local step ``k``."""
        ...


@dataclass(frozen=True)
class Constant:
    """No discount: weight 1 at every staleness (the AD-PSGD rule, Lian et al. 2018)."""

    def weight(self, tau: float, k: int) -> float:
        """Return 1.0 for every valid ``tau`` and ``k``."""
        _check_tau_k(tau, k)
        return 1.0


@dataclass(frozen=True)
class Polynomial:
    """FedAsync polynomial staleness (Xie et al. 2019): ``(1 + tau) ** -a``, ``a >= 0``."""

    a: float = 0.5

    def __post_init__(self) -> None:
        if not (self.a >= 0.0 and math.isfinite(self.a)):
            raise ValueError(f"poly: a must be finite and >= 0, got {self.a!r}")

    def weight(self, tau: float, k: int) -> float:
        """Return ``(1 + tau) ** -a``."""
        _check_tau_k(tau, k)
        return float((1.0 + tau) ** (-self.a))


@dataclass(frozen=True)
class Hinge:
    """FedAsync hinge staleness (Xie et al. 2019): 1 if ``tau <= b`` else ``1 / (a (tau - b) + 1)``."""

    a: float = 10.0
    b: float = 4.0

    def __post_init__(self) -> None:
        if not (self.a >= 0.0 and math.isfinite(self.a)):
            raise ValueError(f"hinge: a must be finite and >= 0, got {self.a!r}")
        if not (self.b >= 0.0 and math.isfinite(self.b)):
            raise ValueError(f"hinge: b must be finite and >= 0, got {self.b!r}")

    def weight(self, tau: float, k: int) -> float:
        """Return 1 up to ``b`` steps of staleness, then ``1 / (a (tau - b) + 1)``."""
        _check_tau_k(tau, k)
        if tau <= self.b or self.a == 0.0:
            return 1.0
        return 1.0 / (self.a * (tau - self.b) + 1.0)


@dataclass(frozen=True)
class Exponential:
    """Exponential staleness discount ``exp(-rate * tau)``, ``rate >= 0``.

    A smooth alternative to the FedAsync polynomial and hinge functions (Xie et al. 2019)
    that forgets faster than any polynomial.
    """

    rate: float = 0.1

    def __post_init__(self) -> None:
        if not (self.rate >= 0.0 and math.isfinite(self.rate)):
            raise ValueError(f"exp: rate must be finite and >= 0, got {self.rate!r}")

    def weight(self, tau: float, k: int) -> float:
        """Return ``exp(-rate * tau)``."""
        _check_tau_k(tau, k)
        if self.rate == 0.0:
            return 1.0
        return math.exp(-self.rate * tau)


@dataclass(frozen=True)
class PipeMare:
    """PipeMare delay annealing (Yang et al. 2021): ``(1 + tau) ** -p_k``, ``p_k = max(p_min, 1 - k/K)``.

    PipeMare divides the step size of a gradient computed on ``tau``-step-old weights by
    ``tau ** p_k`` and anneals ``p_k`` from 1 towards 0 over ``K`` steps; here ``(1 + tau)``
    replaces ``tau`` so that fresh information (``tau = 0``) has weight exactly 1.
    """

    K: int = 2000
    p_min: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.K, int) and self.K > 0):
            raise ValueError(f"pipemare: K must be an integer > 0, got {self.K!r}")
        if not (0.0 <= self.p_min <= 1.0):
            raise ValueError(f"pipemare: p_min must be in [0, 1], got {self.p_min!r}")

    def exponent(self, k: int) -> float:
        """Return the annealed exponent ``p_k = max(p_min, 1 - k / K)``."""
        return max(self.p_min, 1.0 - k / self.K)

    def weight(self, tau: float, k: int) -> float:
        """Return ``(1 + tau) ** -p_k``."""
        _check_tau_k(tau, k)
        return float((1.0 + tau) ** (-self.exponent(k)))


@dataclass(frozen=True)
class StalenessSchedule:
    """A policy with a base mixing rate ``gamma`` and a hard cut-off ``tau_max``.

    ``lam(tau, k) = gamma * policy.weight(tau, k)`` for ``tau <= tau_max`` and 0 past it:
    the CHOCO-SGD consensus step size (Koloskova et al. 2019) discounted by staleness as in
    FedAsync (Xie et al. 2019) or PipeMare (Yang et al. 2021).
    """

    policy: StalenessPolicy
    gamma: float = 0.5
    """Base mixing rate: the weight given to fresh neighbour information. In (0, 1]."""
    tau_max: float = math.inf
    """Information older than this many local steps gets weight 0."""

    def __post_init__(self) -> None:
        if not (0.0 < self.gamma <= 1.0):
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma!r}")
        if not (self.tau_max >= 0.0):
            raise ValueError(f"tau_max must be >= 0, got {self.tau_max!r}")

    def weight(self, tau: float, k: int) -> float:
        """Policy weight in ``[0, 1]``, or 0 when ``tau > tau_max``."""
        _check_tau_k(tau, k)
        if tau > self.tau_max:
            return 0.0
        return self.policy.weight(tau, k)

    def lam(self, tau: float, k: int) -> float:
        """Mixing rate ``gamma * weight(tau, k)``."""
        return self.gamma * self.weight(tau, k)


_POLICIES: dict[str, tuple[type, dict[str, type]]] = {
    "constant": (Constant, {}),
    "poly": (Polynomial, {"a": float}),
    "hinge": (Hinge, {"a": float, "b": float}),
    "exp": (Exponential, {"rate": float}),
    "pipemare": (PipeMare, {"K": int, "p_min": float}),
}
_SCHEDULE_KEYS: dict[str, type] = {"gamma": float, "tau_max": float}


def grammar() -> str:
    """The staleness specs `parse_staleness` reads, one form per policy, from its table (what the
    CLI's `--staleness` help shows): "constant, poly:a=A, …, pipemare:K=K,p_min=P (+gamma=G, …)"."""
    def form(name: str, keys: dict[str, type]) -> str:
        return name + (":" + ",".join(f"{k}={k[0].upper()}" for k in keys) if keys else "")

    extra = ", ".join(f"{k}={k[0].upper()}" for k in _SCHEDULE_KEYS)
    return ", ".join(form(name, keys) for name, (_, keys) in _POLICIES.items()) + f" (+{extra})"


def _convert(name: str, raw: str, kind: type, part: str) -> float | int:
    try:
        if kind is int:
            value: float | int = int(raw)
        else:
            value = float(raw)
    except ValueError:
        raise ValueError(f"staleness spec: {part!r}: {name} must be {kind.__name__}, got {raw!r}") from None
    if kind is float and math.isnan(value):
        raise ValueError(f"staleness spec: {part!r}: {name} must not be NaN")
    return value


def parse_staleness(spec: str) -> StalenessSchedule:
    """Parse a staleness spec such as ``"pipemare:K=2000,p_min=0,gamma=0.5,tau_max=64"``.

    Grammar: ``NAME[:key=value[,key=value...]]`` (a ``,`` may stand for the ``:``, as in
    ``"constant,gamma=0.5"``) where NAME is one of ``constant``,
    ``poly`` (a), ``hinge`` (a, b), ``exp`` (rate), ``pipemare`` (K, p_min) -- the
    FedAsync (Xie et al. 2019) and PipeMare (Yang et al. 2021) discounts -- and the extra
    keys ``gamma`` (default 0.5) and ``tau_max`` (default inf) configure the
    :class:`StalenessSchedule`. Unspecified policy parameters take the class defaults.
    Raises ``ValueError`` naming the offending part.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"staleness spec must be a non-empty string, got {spec!r}")
    text = spec.strip()
    cut = min((i for i in (text.find(":"), text.find(",")) if i >= 0), default=len(text))
    name, rest = text[:cut].strip().lower(), text[cut + 1 :]
    if name not in _POLICIES:
        raise ValueError(f"staleness spec: unknown policy {name!r}; expected one of {sorted(_POLICIES)}")
    cls, keys = _POLICIES[name]
    policy_args: dict[str, float | int] = {}
    schedule_args: dict[str, float | int] = {}
    if rest.strip():
        for part in rest.split(","):
            part = part.strip()
            key, eq, raw = part.partition("=")
            key, raw = key.strip(), raw.strip()
            if not eq or not key or not raw:
                raise ValueError(f"staleness spec: bad part {part!r}; expected key=value")
            if key in keys:
                target, kind = policy_args, keys[key]
            elif key in _SCHEDULE_KEYS:
                target, kind = schedule_args, _SCHEDULE_KEYS[key]
            else:
                allowed = sorted(keys) + sorted(_SCHEDULE_KEYS)
                raise ValueError(f"staleness spec: unknown key {key!r} in {part!r} for {name!r}; allowed: {allowed}")
            if key in target:
                raise ValueError(f"staleness spec: key {key!r} given twice")
            target[key] = _convert(key, raw, kind, part)
    try:
        policy = cls(**policy_args)
        return StalenessSchedule(policy=policy, **schedule_args)
    except ValueError as err:
        raise ValueError(f"staleness spec {spec!r}: {err}") from None


def pair_lambda(policy: StalenessPolicy | StalenessSchedule, tau_i: float, tau_j: float, k: int) -> float:
    """Mixing rate shared by both ends of a pairwise exchange: the rate at ``max(tau_i, tau_j)``.

    In AD-PSGD (Lian et al. 2018) both peers of an exchange average with the same weight,
    which keeps the pair's sum; using the larger staleness on both sides keeps that
    symmetry when the two sides see different delays. With a :class:`StalenessSchedule`
    this returns ``schedule.lam(tau, k)``; with a bare policy, ``policy.weight(tau, k)``.
    """
    _check_tau_k(tau_i, k)
    _check_tau_k(tau_j, k)
    tau = max(tau_i, tau_j)
    lam = getattr(policy, "lam", None)
    if callable(lam):
        return float(lam(tau, k))
    return float(policy.weight(tau, k))
