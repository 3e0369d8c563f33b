"""Synchronous references (DDP all-reduce, DiLoCo outer step) and the config: exact values."""

from __future__ import annotations

import pytest
import torch

from async_opt import DiLoCoOuter, allreduce_mean, allreduce_step


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def test_allreduce_mean_and_step() -> None:
    assert torch.equal(allreduce_mean([t(1, 2), t(3, 4)]), t(2, 3))
    params = [t(10, 10), t(10, 10)]
    g = allreduce_step(params, [t(1, 2), t(3, 4)], lr=0.5)
    assert torch.equal(g, t(2, 3))
    assert torch.equal(params[0], t(9, 8.5)) and torch.equal(params[1], t(9, 8.5))
    params2 = [t(1, 1)]
    assert torch.equal(allreduce_step(params2, [t(4, 4)]), t(4, 4))
    assert torch.equal(params2[0], t(1, 1))  # no lr: params untouched


def test_allreduce_validation() -> None:
    with pytest.raises(ValueError):
        allreduce_step([t(1)], [t(1), t(2)])
    with pytest.raises(ValueError):
        allreduce_mean([])
    with pytest.raises(ValueError):
        allreduce_mean([t(1), t(1, 2)])
    with pytest.raises(ValueError):
        allreduce_step([t(1, 2, 3)], [t(1, 2)])


def test_diloco_nesterov_exact() -> None:
    outer = DiLoCoOuter(lr=0.5, momentum=0.9, nesterov=True)
    g1 = outer.step(t(1.0), [t(0.5), t(0.7)])  # Δ = 0.4, m = 0.4, dir = 0.4 + 0.36
    assert g1.item() == pytest.approx(1 - 0.5 * 0.76, abs=1e-15)
    g2 = outer.step(t(0.62), [t(0.42), t(0.42)])  # Δ = 0.2, m = 0.56, dir = 0.2 + 0.504
    assert g2.item() == pytest.approx(0.62 - 0.5 * 0.704, abs=1e-15)


def test_diloco_plain_momentum_exact() -> None:
    outer = DiLoCoOuter(lr=0.5, momentum=0.9, nesterov=False)
    assert outer.step(t(1.0), [t(0.5), t(0.7)]).item() == pytest.approx(0.8, abs=1e-15)
    assert outer.step(t(0.62), [t(0.42), t(0.42)]).item() == pytest.approx(0.62 - 0.28, abs=1e-15)


def test_diloco_without_momentum_is_parameter_averaging() -> None:
    outer = DiLoCoOuter(lr=1.0, momentum=0.0)
    out = outer.step(t(5, 5), [t(1, 2), t(3, 6)])
    assert torch.equal(out, t(2, 4))


def test_diloco_matches_torch_sgd_nesterov() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, generator=g, dtype=torch.float64)
    ref = torch.nn.Parameter(x.clone())
    opt = torch.optim.SGD([ref], lr=0.7, momentum=0.9, nesterov=True)
    outer = DiLoCoOuter(lr=0.7)
    for _ in range(5):
        workers = [x - 0.1 * torch.randn(6, generator=g, dtype=torch.float64) for _ in range(3)]
        ref.grad = x - torch.stack(workers).mean(0)
        opt.step()
        x = outer.step(x, workers)
        assert torch.allclose(x, ref.detach(), rtol=0, atol=1e-14)


def test_diloco_state_roundtrip_and_validation() -> None:
    a = DiLoCoOuter(lr=0.7)
    a.step(t(1, 1), [t(0, 0)])
    b = DiLoCoOuter(lr=0.1, momentum=0.5, nesterov=False)
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.step(t(2, 2), [t(1, 0)]), b.step(t(2, 2), [t(1, 0)]))
    for kwargs in (dict(lr=0.0), dict(lr=0.7, momentum=1.0)):
        with pytest.raises(ValueError):
            DiLoCoOuter(**kwargs)
    with pytest.raises(ValueError):
        a.step(t(1, 1, 1), [t(0, 0)])
