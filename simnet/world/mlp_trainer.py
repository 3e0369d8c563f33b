"""A small MLP Trainer: real forward/backward passes at a cost that lets hundreds of peers run on a laptop.

Every peer learns the same teacher network (fixed by `problem_seed`) from its own shard.
Shards differ in their input distribution — shard s draws inputs around its own mean,
`heterogeneity` apart — so a peer alone fits its region while the swarm must combine
regions to do well on the global evaluation set: the property gossip experiments need.
All peers start from the same initial weights (seeded by `problem_seed`), as TTS peers do.

Parameters live in one flat tensor with per-layer views, so gossip reads and writes them
without copying layer by layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from peer.trainer import Capabilities, ParamSpec, StepStats, Trainer, flatten_bf16

TASKS = ("classify", "regress")


@dataclass
class MLPConfig:
    task: str = "classify"
    """classify (cross-entropy over out_dim classes) | regress (MSE on out_dim outputs)."""
    in_dim: int = 16
    hidden: int = 32
    out_dim: int = 4
    teacher_hidden: int = 32
    samples_per_shard: int = 256
    batch_size: int = 32
    lr: float = 0.1
    """Plain SGD step size (so averaged replicas equal averaged gradients)."""
    momentum: float = 0.0
    lr_decay_steps: float = 0.0
    """Inverse-time decay lr / (1 + step / lr_decay_steps), the classic schedule under which
    SGD (and gossip's consensus error) settles; 0 keeps the rate constant."""
    heterogeneity: float = 1.5
    """Distance scale between the shards' input means (0: i.i.d. shards)."""
    noise: float = 0.1
    """Label noise: flip probability (classify) or Gaussian sigma (regress)."""
    shard: int = 0
    n_shards: int = 1
    held_shards: int = 1
    """Shards `shard`, `shard + 1`, ... whose samples this trainer holds: a single process with
    the data of that many peers (their very samples) holds `held_shards` > 1."""
    problem_seed: int = 0
    """Seeds the teacher, the shards' means and the initial weights; shared by the swarm."""
    seed: int = 0
    """This replica's data and minibatch order."""
    eval_samples: int = 2048

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"mlp task must be one of {TASKS}, got {self.task!r}")
        sizes = ("in_dim", "hidden", "out_dim", "teacher_hidden", "samples_per_shard", "batch_size", "eval_samples")
        for name in sizes:
            if getattr(self, name) <= 0:
                raise ValueError(f"mlp {name} must be > 0, got {getattr(self, name)}")
        if self.task == "classify" and self.out_dim < 2:
            raise ValueError("a classifier needs out_dim >= 2")
        if not 0 <= self.shard < self.n_shards:
            raise ValueError(f"shard {self.shard} out of range for {self.n_shards} shards")
        if not 1 <= self.held_shards <= self.n_shards - self.shard:
            raise ValueError(f"held_shards {self.held_shards} must be >= 1 and end within the "
                             f"{self.n_shards} shards (shard {self.shard})")
        if not self.lr > 0 or not 0 <= self.momentum < 1:
            raise ValueError("mlp needs lr > 0 and momentum in [0, 1)")
        if min(self.heterogeneity, self.noise, self.lr_decay_steps) < 0:
            raise ValueError("mlp needs heterogeneity, noise and lr_decay_steps >= 0")


class Problem:
    """The teacher and the shard means, rebuilt identically from `problem_seed`."""

    def __init__(self, cfg: MLPConfig) -> None:
        g = torch.Generator().manual_seed(10_007 * cfg.problem_seed + 1)
        self.cfg = cfg
        self.w1 = torch.randn(cfg.in_dim, cfg.teacher_hidden, generator=g) / math.sqrt(cfg.in_dim)
        self.b1 = 0.5 * torch.randn(cfg.teacher_hidden, generator=g)
        self.w2 = torch.randn(cfg.teacher_hidden, cfg.out_dim, generator=g) * (2.0 / math.sqrt(cfg.teacher_hidden))
        self.means = cfg.heterogeneity * torch.randn(cfg.n_shards, cfg.in_dim, generator=g) / math.sqrt(cfg.in_dim) * 2

    def sample(self, shards: torch.Tensor, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs around each listed shard's mean, and the teacher's (noisy) labels."""
        x = self.means[shards] + torch.randn(len(shards), self.cfg.in_dim, generator=g)
        out = torch.tanh(x @ self.w1 + self.b1) @ self.w2
        if self.cfg.task == "regress":
            return x, out + self.cfg.noise * torch.randn(out.shape, generator=g)
        y = out.argmax(1)
        flip = torch.rand(len(y), generator=g) < self.cfg.noise
        return x, torch.where(flip, torch.randint(0, self.cfg.out_dim, y.shape, generator=g), y)


def layer_shapes(cfg: MLPConfig) -> list[tuple[str, tuple[int, ...]]]:
    return [("w1", (cfg.in_dim, cfg.hidden)), ("b1", (cfg.hidden,)),
            ("w2", (cfg.hidden, cfg.out_dim)), ("b2", (cfg.out_dim,))]


def unpack(cfg: MLPConfig, flat: torch.Tensor) -> list[torch.Tensor]:
    """Per-layer views into the flat parameter vector."""
    views, offset = [], 0
    for _, shape in layer_shapes(cfg):
        n = math.prod(shape)
        views.append(flat[offset : offset + n].view(shape))
        offset += n
    return views


def forward(cfg: MLPConfig, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    w1, b1, w2, b2 = unpack(cfg, flat)
    return torch.tanh(x @ w1 + b1) @ w2 + b2


def loss_and_grad(cfg: MLPConfig, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Forward and backward pass written out by hand: for a net this small, autograd's
    bookkeeping costs more than the arithmetic (tests check it against autograd)."""
    w1, b1, w2, b2 = unpack(cfg, flat)
    h = torch.tanh(x @ w1 + b1)
    out = h @ w2 + b2
    loss = loss_fn(cfg, out, y)
    if cfg.task == "classify":
        dout = torch.softmax(out, 1)
        dout[torch.arange(len(y)), y] -= 1.0
        dout /= len(y)
    else:
        dout = 2.0 * (out - y) / out.numel()
    dz = (dout @ w2.T) * (1.0 - h * h)
    grad = torch.cat([(x.T @ dz).reshape(-1), dz.sum(0), (h.T @ dout).reshape(-1), dout.sum(0)])
    return float(loss), grad


def loss_fn(cfg: MLPConfig, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y) if cfg.task == "classify" else F.mse_loss(out, y)


def initial_params(cfg: MLPConfig) -> torch.Tensor:
    g = torch.Generator().manual_seed(10_007 * cfg.problem_seed + 2)
    parts = []
    for name, shape in layer_shapes(cfg):
        if name.startswith("w"):
            parts.append(torch.randn(shape, generator=g).reshape(-1) / math.sqrt(shape[0]))
        else:
            parts.append(torch.zeros(math.prod(shape)))
    return torch.cat(parts)


class MLPTrainer(Trainer):
    """Minibatch SGD on a two-layer tanh MLP over one shard."""

    capabilities = Capabilities(probe=True, additive_steps=True)  # plain SGD

    def __init__(self, cfg: MLPConfig) -> None:
        self.cfg = cfg
        problem = Problem(cfg)
        parts = [problem.sample(torch.full((cfg.samples_per_shard,), s, dtype=torch.long),
                                torch.Generator().manual_seed(cfg.seed * 7919 + s + 3))
                 for s in range(cfg.shard, cfg.shard + cfg.held_shards)]
        self.x, self.y = torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
        self.flat = initial_params(cfg)
        self.velocity = torch.zeros_like(self.flat)
        self.generator = torch.Generator().manual_seed(cfg.seed * 7919 + cfg.shard + 4)
        self._step = 0
        self.step_scale = 1.0

    @property
    def step_count(self) -> int:
        return self._step

    def step(self) -> StepStats:
        idx = torch.randint(0, self.x.shape[0], (self.cfg.batch_size,), generator=self.generator)
        loss, grad = loss_and_grad(self.cfg, self.flat, self.x[idx], self.y[idx])
        if self.cfg.momentum:
            self.velocity.mul_(self.cfg.momentum).add_(grad)
            grad = self.velocity
        self.flat.sub_(grad, alpha=self.lr)
        self._step += 1
        return StepStats(step=self._step, loss=loss, samples=self.cfg.batch_size)

    @property
    def lr(self) -> float:
        if not self.cfg.lr_decay_steps:
            return self.step_scale * self.cfg.lr
        return self.step_scale * self.cfg.lr / (1.0 + self._step / self.cfg.lr_decay_steps)

    def set_step_scale(self, scale: float) -> None:
        """The swarm's step-size multiplier (the Trainer seam)."""
        if not scale > 0:
            raise ValueError(f"step scale must be > 0, got {scale!r}")
        self.step_scale = float(scale)

    def probe_better(self, flat: torch.Tensor) -> bool:
        """Whether parameters `flat` score strictly better than ours on our whole shard (how a
        joiner judges an offered state; a non-finite score never does). Ours are not touched."""
        if flat.shape != self.flat.shape:
            raise ValueError(f"flat vector has shape {tuple(flat.shape)}, expected {tuple(self.flat.shape)}")
        with torch.no_grad():
            theirs = float(loss_fn(self.cfg, forward(self.cfg, flat.to(torch.float32), self.x), self.y))
            ours = float(loss_fn(self.cfg, forward(self.cfg, self.flat, self.x), self.y))
        return math.isfinite(theirs) and theirs < ours

    def param_spec(self) -> ParamSpec:
        return {name: (shape, "float32") for name, shape in layer_shapes(self.cfg)}

    def get_flat_params(self) -> torch.Tensor:
        return self.flat.clone()

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """The parameters rounded straight from where they are held (the Trainer seam): no float32 copy."""
        return flatten_bf16([self.flat], self.flat.numel(), generator, device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        if flat.shape != self.flat.shape:
            raise ValueError(f"flat vector has shape {tuple(flat.shape)}, expected {tuple(self.flat.shape)}")
        self.flat.copy_(flat.to(torch.float32))

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        """A neighbour's state at its `step` (the Trainer seam); the velocity stays ours."""
        self.set_flat_params(flat)
        self._step = int(step)

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {"flat": self.get_flat_params(), "velocity": self.velocity.clone(), "rng": self.generator.get_state()}, {
            "step": self._step
        }

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self.set_flat_params(tensors["flat"])
        self.velocity = tensors["velocity"].clone()
        self.generator.set_state(tensors["rng"])
        self._step = int(meta["step"])

    def close(self) -> None:
        pass


class MLPEvaluator:
    """Loss of any parameter vector on a held-out set drawn from every shard alike."""

    def __init__(self, cfg: MLPConfig) -> None:
        self.cfg = cfg
        g = torch.Generator().manual_seed(10_007 * cfg.problem_seed + 5)
        shards = torch.randint(0, cfg.n_shards, (cfg.eval_samples,), generator=g)
        self.x, self.y = Problem(cfg).sample(shards, g)

    def __call__(self, flat: torch.Tensor) -> float:
        with torch.no_grad():
            return float(loss_fn(self.cfg, forward(self.cfg, flat, self.x), self.y))
