"""Synchronous reference algorithms that the gossip swarm is compared against.

* :func:`allreduce_step` -- data-parallel SGD with an all-reduce of gradients every step
  (the DDP baseline; Li et al. 2020, "PyTorch Distributed").
* :class:`DiLoCoOuter` -- the outer optimiser of DiLoCo (Douillard et al. 2023): workers
  take ``H`` inner steps, the averaged pseudo-gradient ``Δ = x_global − mean(x_workers)``
  is applied with Nesterov momentum.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

__all__ = ["allreduce_mean", "allreduce_step", "DiLoCoOuter"]


def allreduce_mean(tensors: Sequence[Tensor]) -> Tensor:
    """Element-wise mean of equally shaped tensors: all-reduce(sum) / n, as DDP does (Li et al. 2020)."""
    if len(tensors) == 0:
        raise ValueError("allreduce_mean: needs at least one tensor")
    shape = tensors[0].shape
    for idx, t in enumerate(tensors):
        if t.shape != shape:
            raise ValueError(f"allreduce_mean: tensor {idx} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return torch.stack([t.detach() for t in tensors]).mean(dim=0)


def allreduce_step(
    params_list: list[Tensor],
    grads_list: list[Tensor],
    lr: float | None = None,
) -> Tensor:
    """DDP reference step (Li et al. 2020): average the workers' gradients.

    Returns the mean gradient. When ``lr`` is given, also applies the synchronous SGD step
    ``p -= lr * mean_grad`` to every tensor of ``params_list`` **in place**, so replicas
    that started equal stay equal.
    """
    if len(params_list) != len(grads_list):
        raise ValueError(f"allreduce_step: {len(params_list)} params but {len(grads_list)} grads")
    g = allreduce_mean(grads_list)
    for idx, p in enumerate(params_list):
        if p.shape != g.shape:
            raise ValueError(f"allreduce_step: params {idx} has shape {tuple(p.shape)}, expected {tuple(g.shape)}")
    if lr is not None:
        if not (lr >= 0.0):
            raise ValueError(f"lr must be >= 0, got {lr!r}")
        with torch.no_grad():
            for p in params_list:
                p.sub_(g.to(p.dtype), alpha=lr)
    return g


class DiLoCoOuter:
    """DiLoCo outer optimiser (Douillard et al. 2023): Nesterov SGD on the averaged pseudo-gradient.

    ``step(global_x, worker_xs)`` computes ``Δ = global_x − mean(worker_xs)`` and, with
    the momentum buffer ``m`` (zero at first), ``m = μ m + Δ``; the update direction is
    ``Δ + μ m`` with Nesterov and ``m`` without (the ``torch.optim.SGD`` convention);
    returns ``global_x − lr · direction``. DiLoCo's published setting is ``lr=0.7``,
    ``momentum=0.9``, ``nesterov=True``. With ``lr=1`` and ``momentum=0`` this is plain
    parameter averaging (Local SGD).
    """

    def __init__(self, lr: float, momentum: float = 0.9, nesterov: bool = True) -> None:
        if not (lr > 0.0):
            raise ValueError(f"outer lr must be > 0, got {lr!r}")
        if not (0.0 <= momentum < 1.0):
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        self.lr = lr
        self.momentum = momentum
        self.nesterov = nesterov
        self.buf: Tensor | None = None

    def pseudo_gradient(self, global_x: Tensor, worker_xs: Sequence[Tensor]) -> Tensor:
        """Return ``Δ = global_x − mean(worker_xs)`` (DiLoCo's outer gradient)."""
        mean = allreduce_mean(worker_xs)
        if mean.shape != global_x.shape:
            raise ValueError(f"workers have shape {tuple(mean.shape)}, global has {tuple(global_x.shape)}")
        return global_x.detach() - mean.to(global_x.dtype)

    def step(self, global_x: Tensor, worker_xs: Sequence[Tensor]) -> Tensor:
        """One outer step; returns the new global parameters (``global_x`` is not modified)."""
        return self.apply(global_x, self.pseudo_gradient(global_x, worker_xs))

    def apply(self, global_x: Tensor, delta: Tensor) -> Tensor:
        """The outer step on a pseudo-gradient ``delta`` already reduced (SparseLoCo's mean of
        compressed messages, Sarfi et al. 2025); returns the new global parameters."""
        if delta.shape != global_x.shape:
            raise ValueError(f"pseudo-gradient has shape {tuple(delta.shape)}, global has {tuple(global_x.shape)}")
        delta = delta.to(global_x.dtype)
        if self.momentum == 0.0:
            direction = delta
        else:
            if self.buf is None:
                self.buf = delta.clone()
            else:
                self.buf.mul_(self.momentum).add_(delta)
            direction = delta + self.momentum * self.buf if self.nesterov else self.buf
        return global_x.detach() - self.lr * direction

    def state_dict(self) -> dict[str, object]:
        """Momentum buffer and hyper-parameters, for checkpointing."""
        return {"lr": self.lr, "momentum": self.momentum, "nesterov": self.nesterov, "buf": self.buf}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.lr = float(state["lr"])  # type: ignore[arg-type]
        self.momentum = float(state["momentum"])  # type: ignore[arg-type]
        self.nesterov = bool(state["nesterov"])
        buf = state["buf"]
        self.buf = None if buf is None else buf.clone()  # type: ignore[union-attr]
