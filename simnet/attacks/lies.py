"""The parameter lies: what an attacker's trainer shows its node instead of x (`AttackTrainer`).

Each is a method of `Lie` over the attacker's honest parameters x (u = x − x₀ is its honest
progress since the shared start x₀); `simnet.attacks.kinds` says which attack publishes which.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

__all__ = ["Lie"]


class Lie:
    """What a lie is made from: the shared start, the attack's settings, the copies the attacker's
    node holds (`peek`: alie and edge read them), and steer's growing distance."""

    def __init__(self, x0: torch.Tensor, scale: float, z: float, growth: float, gen: torch.Generator,
                 peek: Callable[[], list[torch.Tensor]]) -> None:
        self.x0, self.scale, self.z, self.growth, self.gen, self.peek = x0, scale, z, growth, gen, peek
        self._direction: Optional[torch.Tensor] = None
        self._distance = 0.0

    def sign_flip(self, x: torch.Tensor) -> torch.Tensor:
        return self.x0 - self.scale * (x - self.x0)

    def scaled(self, x: torch.Tensor) -> torch.Tensor:
        return self.x0 + self.scale * (x - self.x0)

    def random(self, x: torch.Tensor) -> torch.Tensor:
        rms = float(x.pow(2).mean().sqrt()) or 1.0
        return x + self.scale * rms * torch.randn(x.shape, generator=self.gen)

    def alie(self, x: torch.Tensor) -> torch.Tensor:
        stack = torch.stack([x] + [c for c in self.peek() if c.shape == x.shape])
        if len(stack) < 2:
            return x
        return stack.mean(0) - self.z * stack.std(0)

    def edge(self, x: torch.Tensor) -> torch.Tensor:
        distances = sorted(float((c - x).norm()) for c in self.peek() if c.shape == x.shape)
        u = x - self.x0
        if not distances or not float(u.norm()) > 0:
            return x
        return x - self.scale * distances[(len(distances) - 1) // 2] * u / u.norm()

    def nan(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, float("nan"))

    def steer(self, x: torch.Tensor) -> torch.Tensor:
        if self._direction is None:
            e = torch.randn(x.shape, generator=self.gen)
            self._direction = e / e.norm()
            self._distance = self.scale * (float(x.pow(2).mean().sqrt()) or 1.0) * x.numel() ** 0.5 * 0.01
        self._distance *= self.growth
        return x + min(self._distance, 1e30) * self._direction
