"""A cheap Trainer (linear least squares) for tests and large simulated swarms.

Each replica sees its own shard of one shared regression problem, so a peer alone fits
only its shard while a swarm that mixes well approaches the global optimum: exactly the
property gossip tests need to measure, at a tiny fraction of a TTS model's cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from peer.trainer import Capabilities, ParamSpec, StepStats, Trainer, flatten_bf16


@dataclass
class LeastSquaresConfig:
    dim: int = 32
    """Number of weights."""
    samples_per_shard: int = 64
    shard: int = 0
    """Which shard of the shared problem this replica sees."""
    n_shards: int = 1
    problem_seed: int = 0
    """Seeds the shared ground truth; all peers of one swarm must use the same one."""
    noise: float = 0.1
    """Label noise; shards also differ in their input distribution (heterogeneous data)."""
    heterogeneity: float = 1.0
    """Per-shard shift of the optimum: 0 gives i.i.d. shards."""
    lr: float = 0.05
    batch_size: int = 16
    seed: int = 0
    """This replica's minibatch order."""

    def __post_init__(self) -> None:
        if self.dim <= 0 or self.samples_per_shard <= 0 or self.batch_size <= 0:
            raise ValueError("dim, samples_per_shard and batch_size must be > 0")
        if not 0 <= self.shard < self.n_shards:
            raise ValueError(f"shard {self.shard} out of range for {self.n_shards} shards")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def make_shard(cfg: LeastSquaresConfig, shard: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of one shard; the shard's optimum is shifted by `heterogeneity`."""
    g = torch.Generator().manual_seed(cfg.problem_seed)
    w_true = torch.randn(cfg.dim, generator=g)
    shifts = torch.randn(cfg.n_shards, cfg.dim, generator=g) * cfg.heterogeneity
    gs = torch.Generator().manual_seed(cfg.problem_seed * 1_000_003 + shard + 1)
    a = torch.randn(cfg.samples_per_shard, cfg.dim, generator=gs)
    b = a @ (w_true + shifts[shard]) + cfg.noise * torch.randn(cfg.samples_per_shard, generator=gs)
    return a, b


class LeastSquaresTrainer(Trainer):
    """Minibatch SGD on 0.5·||Aw − b||² / n over one shard."""

    capabilities = Capabilities(probe=True, additive_steps=True)  # plain SGD

    def __init__(self, cfg: LeastSquaresConfig) -> None:
        self.cfg = cfg
        self.a, self.b = make_shard(cfg, cfg.shard)
        self.w = torch.zeros(cfg.dim)
        self.generator = torch.Generator().manual_seed(cfg.seed)
        self._step = 0
        self.step_scale = 1.0

    @property
    def step_count(self) -> int:
        return self._step

    def step(self) -> StepStats:
        idx = torch.randint(0, self.a.shape[0], (self.cfg.batch_size,), generator=self.generator)
        a, b = self.a[idx], self.b[idx]
        residual = a @ self.w - b
        loss = 0.5 * float((residual**2).mean())
        self.w -= self.step_scale * self.cfg.lr * (a.T @ residual) / len(idx)
        self._step += 1
        return StepStats(step=self._step, loss=loss, samples=len(idx))

    def loss_on(self, a: torch.Tensor, b: torch.Tensor, w: torch.Tensor | None = None) -> float:
        w = self.w if w is None else w.to(torch.float32)
        return 0.5 * float(((a @ w - b) ** 2).mean())

    def probe_better(self, flat: torch.Tensor) -> bool:
        """Whether weights `flat` fit our whole shard strictly better than ours (how a joiner judges
        an offered state; a non-finite score never does). Our weights are not touched."""
        if flat.shape != self.w.shape:
            raise ValueError(f"flat vector has shape {tuple(flat.shape)}, expected {tuple(self.w.shape)}")
        theirs = self.loss_on(self.a, self.b, flat)
        return math.isfinite(theirs) and theirs < self.loss_on(self.a, self.b)

    def param_spec(self) -> ParamSpec:
        return {"w": ((self.cfg.dim,), "float32")}

    def set_step_scale(self, scale: float) -> None:
        """The swarm's step-size multiplier (the Trainer seam)."""
        if not scale > 0:
            raise ValueError(f"step scale must be > 0, got {scale!r}")
        self.step_scale = float(scale)

    def get_flat_params(self) -> torch.Tensor:
        return self.w.clone()

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """The weights rounded straight from where they are held (the Trainer seam): no float32 copy."""
        return flatten_bf16([self.w], self.w.numel(), generator, device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        if flat.shape != self.w.shape:
            raise ValueError(f"flat vector has shape {tuple(flat.shape)}, expected {tuple(self.w.shape)}")
        self.w = flat.to(torch.float32).clone()

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        """A neighbour's state at its `step` (the Trainer seam)."""
        self.set_flat_params(flat)
        self._step = int(step)

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {"w": self.w.clone(), "rng": self.generator.get_state()}, {"step": self._step}

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self.set_flat_params(tensors["w"])
        self.generator.set_state(tensors["rng"])
        self._step = int(meta["step"])

    def close(self) -> None:
        pass
