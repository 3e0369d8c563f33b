"""Staleness policies, schedules, spec parsing and the shared pair rate: exact values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from async_opt import (
    Constant,
    Exponential,
    Hinge,
    PipeMare,
    Polynomial,
    StalenessPolicy,
    StalenessSchedule,
    pair_lambda,
    parse_staleness,
)


def test_constant_is_one_everywhere() -> None:
    c = Constant()
    assert c.weight(0, 0) == 1.0
    assert c.weight(1e6, 10**9) == 1.0


@pytest.mark.parametrize(
    ("a", "tau", "expected"),
    [(0.5, 0.0, 1.0), (0.5, 3.0, 0.5), (1.0, 9.0, 0.1), (2.0, 1.0, 0.25), (0.0, 100.0, 1.0)],
)
def test_polynomial_exact(a: float, tau: float, expected: float) -> None:
    assert Polynomial(a).weight(tau, 0) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize(
    ("tau", "expected"),
    [(0.0, 1.0), (4.0, 1.0), (4.5, 1 / 6), (5.0, 1 / 11), (14.0, 1 / 101)],
)
def test_hinge_exact(tau: float, expected: float) -> None:
    assert Hinge(a=10, b=4).weight(tau, 7) == pytest.approx(expected, abs=1e-15)


def test_exponential_exact() -> None:
    e = Exponential(rate=math.log(2))
    assert e.weight(0, 0) == 1.0
    assert e.weight(1, 0) == pytest.approx(0.5, abs=1e-15)
    assert e.weight(3, 0) == pytest.approx(0.125, abs=1e-15)
    assert Exponential(rate=0.1).weight(10, 0) == pytest.approx(math.exp(-1), abs=1e-15)
    assert Exponential(rate=0.0).weight(math.inf, 0) == 1.0


@pytest.mark.parametrize(
    ("p_min", "k", "tau", "expected"),
    [
        (0.0, 0, 3.0, 0.25),  # p = 1
        (0.0, 50, 3.0, 0.5),  # p = 1/2
        (0.0, 100, 3.0, 1.0),  # p = 0: stale information fully trusted
        (0.0, 200, 3.0, 1.0),  # past K, p stays at p_min
        (0.25, 100, 15.0, 0.5),  # p = p_min = 1/4: 16 ** -0.25
        (0.25, 0, 15.0, 1 / 16),  # p = 1
        (0.0, 0, 0.0, 1.0),  # fresh information always weight 1
    ],
)
def test_pipemare_exact(p_min: float, k: int, tau: float, expected: float) -> None:
    assert PipeMare(K=100, p_min=p_min).weight(tau, k) == pytest.approx(expected, abs=1e-15)


def test_pipemare_exponent_anneals() -> None:
    p = PipeMare(K=10, p_min=0.2)
    assert [p.exponent(k) for k in (0, 5, 8, 9, 100)] == pytest.approx([1.0, 0.5, 0.2, 0.2, 0.2])


def test_policies_satisfy_protocol() -> None:
    for pol in (Constant(), Polynomial(), Hinge(), Exponential(), PipeMare()):
        assert isinstance(pol, StalenessPolicy)


@pytest.mark.parametrize("bad_tau", [-1.0, -1e-9, math.nan, "3", None])
def test_bad_tau_raises(bad_tau: object) -> None:
    for pol in (Constant(), Polynomial(), Hinge(), Exponential(), PipeMare()):
        with pytest.raises(ValueError, match="tau"):
            pol.weight(bad_tau, 0)  # type: ignore[arg-type]


def test_negative_k_raises() -> None:
    with pytest.raises(ValueError, match="step k"):
        PipeMare().weight(1.0, -1)


@pytest.mark.parametrize(
    "make",
    [lambda: Polynomial(-1), lambda: Hinge(a=-1), lambda: Hinge(b=math.nan), lambda: Exponential(-0.1),
     lambda: PipeMare(K=0), lambda: PipeMare(p_min=1.5)],
)
def test_bad_parameters_raise(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        make()


_POLICIES = [Constant(), Polynomial(0.5), Polynomial(2.0), Hinge(10, 4), Hinge(0.5, 0), Exponential(0.1),
             PipeMare(100, 0.0), PipeMare(100, 0.3)]


@settings(max_examples=60, deadline=None)
@given(
    idx=st.integers(0, len(_POLICIES) - 1),
    t1=st.floats(0, 1e4, allow_nan=False),
    t2=st.floats(0, 1e4, allow_nan=False),
    k=st.integers(0, 10**6),
)
def test_weights_in_unit_interval_and_non_increasing(idx: int, t1: float, t2: float, k: int) -> None:
    pol = _POLICIES[idx]
    lo, hi = sorted((t1, t2))
    w_lo, w_hi = pol.weight(lo, k), pol.weight(hi, k)
    assert 0.0 <= w_hi <= w_lo <= 1.0


# ---------------------------------------------------------------- schedule and parser


def test_schedule_lam_and_cutoff() -> None:
    s = parse_staleness("pipemare:K=100,p_min=0,gamma=0.5,tau_max=8")
    assert isinstance(s.policy, PipeMare) and s.policy.K == 100 and s.policy.p_min == 0.0
    assert s.gamma == 0.5 and s.tau_max == 8.0
    assert s.lam(0, 0) == 0.5
    assert s.lam(3, 0) == pytest.approx(0.125, abs=1e-15)
    assert s.lam(8, 50) == pytest.approx(0.5 / 3, abs=1e-15)  # at the cut-off: still counted
    assert s.lam(8.5, 50) == 0.0  # past it: zero
    assert s.lam(1e9, 100) == 0.0
    assert s.weight(9, 100) == 0.0


@pytest.mark.parametrize(
    ("spec", "policy", "gamma", "tau_max"),
    [
        ("constant", Constant(), 0.5, math.inf),
        ("constant,gamma=0.25,tau_max=64", Constant(), 0.25, 64.0),
        ("constant:gamma=0.25", Constant(), 0.25, math.inf),
        ("poly:a=0.5", Polynomial(0.5), 0.5, math.inf),
        ("hinge:a=10,b=4", Hinge(10.0, 4.0), 0.5, math.inf),
        ("exp:rate=0.1", Exponential(0.1), 0.5, math.inf),
        ("pipemare:K=2000,p_min=0", PipeMare(2000, 0.0), 0.5, math.inf),
        (" PipeMare : K = 10 , gamma = 1 ", PipeMare(10, 0.0), 1.0, math.inf),
        ("hinge", Hinge(), 0.5, math.inf),
    ],
)
def test_parse_valid(spec: str, policy: object, gamma: float, tau_max: float) -> None:
    s = parse_staleness(spec)
    assert s.policy == policy
    assert s.gamma == gamma
    assert s.tau_max == tau_max


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("bogus:a=1", "bogus"),
        ("poly:a=x", "a=x"),
        ("hinge:c=1", "'c'"),
        ("poly:a", "'a'"),
        ("poly:a=-1", "a must"),
        ("pipemare:K=1.5", "K=1.5"),
        ("poly:a=0.5,gamma=2", "gamma"),
        ("poly:a=1,a=2", "twice"),
        ("exp:rate=nan", "NaN"),
        ("constant,tau_max=-1", "tau_max"),
        ("", "non-empty"),
    ],
)
def test_parse_errors_name_the_bad_part(spec: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_staleness(spec)


def test_schedule_validation() -> None:
    with pytest.raises(ValueError, match="gamma"):
        StalenessSchedule(Constant(), gamma=0.0)
    with pytest.raises(ValueError, match="tau_max"):
        StalenessSchedule(Constant(), tau_max=-1)


# ---------------------------------------------------------------- pair rate


def test_pair_lambda_uses_larger_tau() -> None:
    s = parse_staleness("pipemare:K=100,gamma=0.5,tau_max=8")
    assert pair_lambda(s, 1, 3, 50) == pytest.approx(0.25, abs=1e-15)  # 0.5 * 4 ** -0.5
    assert pair_lambda(s, 3, 1, 50) == pair_lambda(s, 1, 3, 50)
    assert pair_lambda(s, 0, 0, 0) == 0.5
    assert pair_lambda(s, 2, 9, 50) == 0.0  # one side past the cut-off: neither mixes
    # a bare policy gives its weight
    assert pair_lambda(Polynomial(1.0), 1, 3, 0) == pytest.approx(0.25, abs=1e-15)
    with pytest.raises(ValueError):
        pair_lambda(s, -1, 3, 0)


def test_pair_lambda_keeps_the_pair_sum() -> None:
    """Two peers mixing with fresh copies keep x_i + x_j only if they use the same rate."""
    s = parse_staleness("poly:a=1,gamma=0.5")
    xi, xj, tau_i, tau_j = 1.0, 5.0, 1.0, 3.0
    lam = pair_lambda(s, tau_i, tau_j, 0)
    assert (xi + lam * (xj - xi)) + (xj + lam * (xi - xj)) == pytest.approx(xi + xj, abs=1e-15)
    li, lj = s.lam(tau_i, 0), s.lam(tau_j, 0)  # each side its own rate: the sum drifts
    assert (xi + li * (xj - xi)) + (xj + lj * (xi - xj)) != pytest.approx(xi + xj, abs=1e-3)


def test_the_grammar_names_every_policy_and_each_form_parses() -> None:
    """`--staleness`'s help is read from the parser's own table (async_opt.staleness.grammar), and
    what it shows parses: a policy added to the table is in the help without another edit."""
    import re
    import subprocess
    import sys

    from async_opt.staleness import _POLICIES, grammar

    text = grammar()
    forms = text.split(" (+")[0].split(", ")
    assert [f.split(":")[0] for f in forms] == list(_POLICIES)
    for form in forms:
        spec = re.sub(r"=([A-Za-z])\b", "=1", form)  # every placeholder a value
        assert parse_staleness(spec).policy is not None, form
    loaded = subprocess.run([sys.executable, "-c", "import sys, async_opt.staleness as s; s.grammar(); "
                             "print('torch' in sys.modules)"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"  # the CLI reads it without torch
