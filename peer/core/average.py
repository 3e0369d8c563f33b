"""The peer's averaged weights: a power-function EMA of its estimate of the swarm's mean.

What users synthesise from and what checkpoints carry as `average.*` (async_opt.averaging
says why and how). Updated by the node's owner at a publish when the EMA is due a sample
(`PowerEma.due`: every few steps), from the parameters just published and the neighbour copies
held then; read by the training thread (checkpoints) through `weights`.

Held in three bytes a parameter by default (`GossipConfig.average_dtype`: a float32's top three
bytes, a bfloat16's bits and the next byte, `async_opt.packed_float`), updated in place a piece
at a time from the estimate, so a sample after the first allocates nothing parameter-sized;
`weights` copies it out and retries while an update overlaps. "float32" keeps a whole float32 copy, replaced at each sample.
"""

from __future__ import annotations

from typing import Callable

import torch

from async_opt import safe_distances
from async_opt.averaging import PowerEma, SwarmEstimate, progress_ratio
from peer.core.gossip_config import GossipConfig
from peer.core.view import MixView


class SwarmAverage:
    """Owned by the node's owner thread (`GossipNode.publish` calls `update`); others call `weights`."""

    def __init__(self, cfg: GossipConfig, device: torch.device | None = None) -> None:
        """`device`: where the node holds its copies, and so the average (None: the CPU)."""
        self.cfg, self.device = cfg, device
        self.ema = (PowerEma(cfg.average_sigma_rel, packed=cfg.average_dtype != "float32")
                    if cfg.average_sigma_rel > 0 else None)
        # Its own radius, by the mixer's rule and settings (the mixer's belongs to the training
        # thread): a copy's share of x̃ is bounded as its pull is.
        self.radius = cfg.clip_radius()
        self._generator: torch.Generator | None = None  # rounds a packed average's low byte
        self.weigh_progress = True
        """False counts every model alike however far ahead its owner is (the control arm of
        `benchmarks/averaging_probe.py --straggler`; async_opt.averaging says why it is on)."""

    def weights(self, attempts: int = 8, pause: Callable[[], None] | None = None) -> tuple[torch.Tensor, int] | None:
        """(the averaged weights as a float32 CPU tensor no one writes again, the step of the newest
        sample), from any thread; None before the first sample, or while an update overlapped every
        one of `attempts` copies (`pause` runs between them: a checkpoint waits there rather than
        be written without its average). An update that ends during the call may leave the step one
        sample behind the weights."""
        if self.ema is None:
            return None
        step, value = self.ema.step, self.ema.read(attempts, pause)
        return None if value is None else (value.cpu(), step)  # a checkpoint writes from host memory

    def due(self, step: int) -> bool:
        """Whether `update` at `step` would take a sample (callers skip building `x` when not)."""
        return self.ema is not None and self.ema.due(step)

    def update(self, x: torch.Tensor, view: MixView, step: int) -> None:
        """Fold in the estimate at a publish, when due: `x` just published, `view` the copies held now."""
        if not self.due(step):
            return
        # every copy's distance: as the view measured it, else in one pass over x̂_i without a temporary
        missing = [c for c in view.copies if c.distance is None]
        measured = iter(safe_distances([c.x_hat for c in missing], view.public))
        distances = [c.distance if c.distance is not None else next(measured) for c in view.copies]
        copies = list(zip((c.x_hat for c in view.copies), distances))
        for c, distance in zip(view.copies, distances):
            self.radius.observe(c.key, distance)
        self.radius.keep_only({c.key for c in view.copies})
        rho = self.radius.radius(view.public_norm, view.public_moves) if self.cfg.clip else None
        progress = progress_ratio(step, [c.step for c in view.copies]) if self.weigh_progress else 1.0
        if self._generator is None or self._generator.device != x.device:
            # seeded alike everywhere: a run is repeatable (simnet's from its seed), and the noise
            # only rounds our own average's low byte
            self._generator = torch.Generator(x.device).manual_seed(0)
        self.ema.update(SwarmEstimate(x, view.public, copies, rho, self.cfg.clip_power, progress), step,
                        generator=self._generator)

    def reset(self, x: torch.Tensor, step: int) -> None:
        """Start again from `x` at `step` (we adopted a neighbour's state, at its step: what we
        averaged is not ours; or we resumed a saved average)."""
        if self.ema is not None:
            self.ema.reset(x.to(self.device), step)
