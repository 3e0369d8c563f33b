"""BoundaryHook's bookkeeping: what a step reports reaches /metrics; publishes every gossip_every steps."""

from __future__ import annotations

import torch

from peer.boundary import BoundaryHook, PendingPublish
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.view import MixView, ViewSlot
from peer.metrics import Metrics
from peer.trainer import StepStats


class Flat:
    def __init__(self) -> None:
        self.x, self.step_count = torch.zeros(4), 0

    def get_flat_params(self) -> torch.Tensor:
        return self.x.clone()

    def set_flat_params(self, flat: torch.Tensor) -> None:
        self.x = flat.clone()


def test_trainer_figures_become_gauges_and_a_copy_is_handed_over_when_due():
    metrics, pending, told = Metrics(), PendingPublish(), []
    hook = BoundaryHook(Mixer(GossipConfig(swarm="t")), ViewSlot(MixView(torch.zeros(4))), pending,
                        lambda step, due: told.append((step, due)), metrics, 2, lambda: 0.0)
    tr = Flat()
    for k in (1, 2):
        tr.step_count = k
        hook(tr, StepStats(k, 0.5, 8, extra={"skipped_samples": 3.0, "shard_errors": 1.0, "lr": 1e-3}))
    assert metrics.get("skipped_samples") == 3.0 and metrics.get("shard_errors") == 1.0
    assert "lr" not in metrics.render()  # only the listed figures become series
    assert told == [(1, False), (2, True)]
    assert pending.take()[1] == 2
