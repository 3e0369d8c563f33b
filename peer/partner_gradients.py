"""A trainer's half of partner gradients (`Capabilities.partner_gradients`): the bookkeeping any
trainer with Adam-type steps can hold, so each needs only to call `after_backward` between its
backward pass and its clipping and optimiser step.

It keeps the sum of our raw gradients since the last `gradient_sum` (what the next update frame
carries, peer.core.partner_steps) and, where the step boundary set one, blends partners' weighted
mean gradient into every step's gradient: g ← (g + Σ wᵢ·ḡᵢ) / (1 + Σ wᵢ), so the step is on the
weighted mean of our batch's gradient and theirs. Owned by the training thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from peer.trainer import flatten


class GradientBlend:
    """Our gradient sum out, partners' mean gradient in; see the module docstring."""

    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None
        self._tracking = False
        self._partner: torch.Tensor | None = None
        self._weight = 0.0

    def gradient_sum(self, numel: int) -> torch.Tensor:
        """`Trainer.gradient_sum` for a model of `numel` parameters."""
        total = self._sum if self._sum is not None else torch.zeros(numel)
        self._sum, self._tracking = None, True
        return total

    def blend(self, gradient: torch.Tensor | None, weight: float) -> None:
        """`Trainer.blend_partner_gradient`."""
        if gradient is not None and not (weight > 0.0):
            raise ValueError(f"a partner gradient needs a weight > 0, got {weight!r}")
        self._partner, self._weight = gradient, (float(weight) if gradient is not None else 0.0)

    def after_backward(self, params: Sequence[torch.Tensor]) -> None:
        """Between backward and the optimiser step: add the raw gradients of `params` (the gossiped
        parameters, in flat order; a missing gradient counts as zeros) to the sum, then blend."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        if self._tracking:
            flat = flatten(grads)
            self._sum = flat if self._sum is None else self._sum.add_(flat)
        if self._partner is None:
            return
        offset, scale = 0, 1.0 / (1.0 + self._weight)
        for p, g in zip(params, grads):
            n = g.numel()
            part = self._partner[offset:offset + n].view_as(g).to(g.device, g.dtype)
            blended = g.add(part).mul_(scale)
            if p.grad is None:
                p.grad = blended
            else:
                p.grad.copy_(blended)
            offset += n
