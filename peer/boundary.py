"""The step boundary, shared by both drivers: where training meets gossip.

A real peer runs `BoundaryHook` on its training thread after every local step; simnet runs
the same object on its event loop after every simulated step. It mixes news from the
newest immutable view of the neighbour copies (`peer.core.mixer.Mixer`), hands a copy of
the parameters to `PendingPublish` when a publish is due, and tells the session. See
docs/architecture.md.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch

from peer.core.cadence import PublishCadence
from peer.core.mixer import Mixer
from peer.core.view import ViewSlot
from peer.metrics import Metrics
from peer.trainer import StepStats, Trainer


TRAINER_GAUGES = ("tflops", "mfu", "peak_mem_gib", "skipped_samples", "shard_errors")
"""Figures a trainer may report in StepStats.extra that /metrics shows as gauges (their help:
`peer.metric_help.CATALOGUE`)."""


class PendingPublish:
    """The newest parameter copy waiting to be published (newest wins), and whether a publish
    job is already queued for it.

    C(x_new − x̂) already carries everything an older, unpublished copy would have, so only
    the newest copy is kept, and at most one publish job waits on the node worker: when
    publishing is slower than the training steps that ask for it, publishes coalesce instead
    of piling up in front of the exchanges. The lock guards these reference swaps, never any work.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: tuple[torch.Tensor, int] | None = None
        self._job_queued = False

    def put(self, x: torch.Tensor, step: int) -> None:
        """Training thread: hand over a copy taken at a step boundary."""
        with self._lock:
            self._item = (x, step)

    def needs_job(self) -> bool:
        """Driver: True when no publish job is waiting (the caller then queues one)."""
        with self._lock:
            queued, self._job_queued = self._job_queued, True
        return not queued

    def take(self) -> tuple[torch.Tensor, int] | None:
        """Worker, as a publish job starts: the newest copy, or None when it was already taken."""
        with self._lock:
            item, self._item = self._item, None
            self._job_queued = False
        return item


class BoundaryHook:
    """The training thread's step-boundary work: mix from the view, hand over a publish copy.

    Called on the training thread only. It reads the node's `view_slot` (immutable views)
    and writes `pending` (a reference swap under a lock that guards nothing else): neither
    can block behind node work. `notify(step, publish_due)` tells the driver's session.
    """

    def __init__(self, mixer: Mixer, view_slot: ViewSlot, pending: PendingPublish,
                 notify: Callable[[int, bool], None], metrics: Metrics, cadence: PublishCadence,
                 clock: Callable[[], float]) -> None:
        """`cadence` decides when a publish is due (a peer's: `GossipConfig.publish_cadence()`)."""
        self.mixer, self.view_slot, self.pending, self.notify = mixer, view_slot, pending, notify
        self.metrics, self.cadence, self.clock = metrics, cadence, clock
        self.step_scale = mixer.cfg.step_scale_rule()
        self._scale_set = 1.0  # what the trainer was last told (a trainer starts at its own rate)
        self.last_mixed = 0
        """Neighbour copies mixed at the last boundary (simnet charges their arithmetic)."""

    def __call__(self, trainer: Trainer, stats: StepStats) -> None:
        self.metrics.set("steps", stats.step)
        self.metrics.set("loss", stats.loss)
        self.metrics.inc("samples_total", stats.samples)
        for name in TRAINER_GAUGES:
            if name in stats.extra:
                self.metrics.set(name, stats.extra[name])
        k = trainer.step_count
        now = self.clock()
        self.mixer.observe_boundary(now)
        view = self.view_slot.current
        self.cadence.observe(view)
        self.last_mixed = 0
        ended = self.mixer.end_period(view)
        scale = self.step_scale.value if ended is None else self.step_scale.period_ended(ended)
        if scale != self._scale_set:
            trainer.set_step_scale(scale)
            self._scale_set = scale
            self.metrics.set("step_scale", scale)
        if self.mixer.has_news(view):
            add = trainer.add_to_flat_params if trainer.capabilities.add_in_place else None  # no parameter copy
            mixed, report = self.mixer.mix(None if add else trainer.get_flat_params(), view, k, now)
            if report.mixed:
                self.last_mixed = report.mixed
                (add or trainer.set_flat_params)(mixed)
                self.metrics.inc("mixes_total", report.mixed)
                if report.clipped:
                    self.metrics.inc("mix_clipped_total", report.clipped)
                if report.radius is not None:
                    self.metrics.set("clip_radius", report.radius)
                for tau in report.staleness_steps:
                    self.metrics.observe("mixed_staleness_steps", tau)
                for key, distance in report.distances.items():
                    self.metrics.set("neighbour_distance", distance, peer=key.hex()[:16])
        due = self.cadence.due(k, now)
        if due:  # a copy: the worker compresses it while training goes on
            self.cadence.published(k, now)
            self.pending.put(trainer.get_flat_params(), stats.step)
        self.notify(stats.step, due)
