"""The averaged weights in checkpoints: written as `average.<parameter name>`, restored on resume,
and kept by a peer that does not gossip (`--solo`) by the same rule (peer.core.average).

A gossiping peer's average lives in its node (`GossipNode.average`, updated at a publish when it
is due a sample: `PowerEma.due`); a solo peer has no node, so `SoloAverage` samples the
parameters at the steps a publish would, by the same rule, with no neighbour copies: the same
weights a lone gossip peer would keep.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from peer.local.checkpoint import AVERAGE_PREFIX
from peer.core.average import SwarmAverage
from peer.core.gossip_config import GossipConfig
from peer.core.view import MixView
from peer.trainer import ParamSpec, StepStats, Trainer, flatten, split_flat

META_KEY = "average"
READ_PAUSE_S = 0.02
"""How long a checkpoint waits between tries to copy out an average being updated."""
CHECKPOINT_WAIT_S = 120.0
"""The longest a checkpoint waits for the average's update to end (a sample of echo-2.4b's takes
tens of seconds on one core)."""


def checkpoint_tensors(average: SwarmAverage, spec: ParamSpec) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """`average.<name>` tensors and their metadata for a checkpoint (none before the first sample).

    Safe from any thread (`SwarmAverage.weights` copies the average out). While the node worker
    updates the average in place (seconds at the sizes users train) it waits, up to
    `CHECKPOINT_WAIT_S`, rather than write a checkpoint without it."""
    current = average.weights(attempts=int(CHECKPOINT_WAIT_S / READ_PAUSE_S) + 1, pause=lambda: time.sleep(READ_PAUSE_S))
    if current is None:
        return {}, {}
    flat, step = current
    return split_flat(flat, spec, AVERAGE_PREFIX), {META_KEY: {"step": step, "sigma_rel": average.cfg.average_sigma_rel}}


def restore(average: SwarmAverage, spec: ParamSpec, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> bool:
    """Continue from the averaged weights a resumed checkpoint carries; False (and nothing changed)
    when it has none or they do not fit `spec` (the average then starts from the live parameters)."""
    info = meta.get(META_KEY)
    names = [AVERAGE_PREFIX + name for name in spec]
    if not isinstance(info, dict) or not isinstance(info.get("step"), int) or not all(n in tensors for n in names):
        return False
    if any(tuple(tensors[AVERAGE_PREFIX + name].shape) != tuple(shape) for name, (shape, _) in spec.items()):
        return False
    average.reset(flatten([tensors[n] for n in names]), info["step"])
    return True


class SoloAverage:
    """A step hook for a peer that trains alone: the averaged weights, sampled at the steps a
    gossiping peer would publish (every pinned `gossip_every`, else every step) when the average is due a sample."""

    def __init__(self, cfg: GossipConfig, spec: ParamSpec) -> None:
        self.average, self.every, self.spec = SwarmAverage(cfg), cfg.period_floor, spec

    def __call__(self, trainer: Trainer, stats: StepStats) -> None:
        if stats.step % self.every == 0 and self.average.due(stats.step):
            x = trainer.get_flat_params()
            self.average.update(x, MixView(x), stats.step)

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """For `run_loop(extra_state=...)`."""
        return checkpoint_tensors(self.average, self.spec)

    def restore(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """For `run_loop(restore_extra=...)`."""
        restore(self.average, self.spec, tensors, meta)
