"""The step boundary, shared by both drivers: where training meets gossip.

A real peer runs `BoundaryHook` on its training thread after every local step; simnet runs
the same object on its event loop after every simulated step. It mixes news from the
newest view of the neighbour copies (`peer.core.mixer.Mixer`, inside `ViewSlot.reading`), hands a copy of
the parameters to `PendingPublish` when a publish is due, and tells the session. See
docs/architecture.md.
"""

from __future__ import annotations

import math
import threading
from typing import Callable

import torch

from peer import cadence_gauges
from peer.core.cadence import PublishCadence
from peer.core.mixer import Mixer, MixReport
from peer.core.partner_steps import StepInbox
from peer.core.view import MixView, ViewSlot
from peer.metrics import Metrics
from peer.protocol_time import ProtocolTime
from peer.trainer import StepStats, Trainer


MIX_SPANS = 32
"""A mix adds its change to an add-in-place trainer in about this many spans of whole tensors:
the largest float32 temporary it makes is a span, not the model (a whole change was one more
float32 copy at every mix)."""
TRAINER_GAUGES = ("tflops", "mfu", "peak_mem_gib", "skipped_samples", "shard_errors")
"""Figures a trainer may report in StepStats.extra that /metrics shows as gauges (their help:
`peer.metric_help.CATALOGUE`)."""


class PendingPublish:
    """The newest parameter copy waiting to be published (newest wins), and whether a publish
    job is queued for it or running.

    C(x_new − x̂) already carries everything an older, unpublished copy would have, so at most
    one copy waits and at most one publish job is queued on the node worker: when publishing is
    slower than the training steps that ask for it, publishes come less often instead of piling
    up in front of the exchanges. `ready` tells the training thread whether a copy taken now
    would be the next one published: while one waits or is being published it would only
    replace or follow it, and at the sizes users train a copy is the whole model (a
    device-to-host transfer of gigabytes on a GPU peer), so the boundary takes none then. A copy
    put while another waits replaces it, and what came from outside our own steps (`outside`,
    for partner steps) then adds up. The lock guards these reference swaps and that add, never
    any other work.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._item: tuple[torch.Tensor, int, torch.Tensor | None] | None = None
        self._job_queued = False
        self._publishing = False
        """A publish job took a copy and has not said `finished` yet."""

    def ready(self) -> bool:
        """Training thread: True when no copy waits and no publish is under way, so a copy handed
        over now is the next one published."""
        with self._lock:
            return self._item is None and not self._job_queued and not self._publishing

    def put(self, x: torch.Tensor, step: int, outside: torch.Tensor | None = None) -> None:
        """Training thread: hand over a copy taken at a step boundary, with what mixing and
        partners' steps added since the previous hand-over (None: not tracked)."""
        with self._lock:
            if self._item is not None and outside is not None and self._item[2] is not None:
                outside = outside.add_(self._item[2])  # the older copy was never published
            self._item = (x, step, outside)

    def needs_job(self) -> bool:
        """`peer.core.perform`, for either driver: True when no publish job is waiting (it then queues one)."""
        with self._lock:
            queued, self._job_queued = self._job_queued, True
        return not queued

    def take(self) -> tuple[torch.Tensor, int, torch.Tensor | None] | None:
        """Worker, as a publish job starts: (the newest copy, its step, what came from outside since
        the last publish), or None when it was already taken."""
        with self._lock:
            item, self._item = self._item, None
            self._job_queued = False
            self._publishing = item is not None
        return item

    def finished(self) -> None:
        """Worker, when the publish of a copy `take` returned has ended (published or refused)."""
        with self._lock:
            self._publishing = False


class BoundaryHook:
    """The training thread's step-boundary work: mix from the view, hand over a publish copy.

    Called on the training thread only. It reads the node's `view_slot` (the copies' tensors
    inside `ViewSlot.reading`, which the worker waits out before writing one), drains `steps`
    (partners' steps the node took) and writes `pending`, each under a lock that guards a
    reference swap or one add: none can block behind node work.
    `notify(step, publish_due)` tells the driver's session.
    """

    def __init__(self, mixer: Mixer, view_slot: ViewSlot, pending: PendingPublish,
                 notify: Callable[[int, bool], None], metrics: Metrics, cadence: PublishCadence,
                 clock: Callable[[], float], steps: StepInbox | None = None,
                 protocol: ProtocolTime | None = None, rounding_seed: int = 0, device: torch.device | None = None) -> None:
        """`cadence` decides when a publish is due (a peer's: `GossipConfig.publish_cadence()`);
        `steps`: the node's `partner_steps.inbox` (None: this peer takes no partner steps);
        `protocol`: what gossip costs this peer, which a budgeted cadence weighs at each publish
        (None: nothing, so a budget keeps a publish every step); `device`: where the node holds its
        copies (`GossipNode.device`), where a bfloat16 hand-over is made (None: the CPU)."""
        self.mixer, self.view_slot, self.pending, self.notify = mixer, view_slot, pending, notify
        self.metrics, self.cadence, self.clock, self.steps, self.device = metrics, cadence, clock, steps, device
        self.protocol = protocol or ProtocolTime.free()
        self._rounding = torch.Generator().manual_seed(rounding_seed)
        """Random bits of a bfloat16 hand-over's rounding (`GossipConfig.handover_bfloat16`): peers
        seed it apart, so their roundings are independent."""
        cadence_gauges.record(metrics, cadence.reading())
        self._outside: torch.Tensor | None = None
        """What mixing and partners' steps added since the last hand-over (tracked with `steps`)."""
        self.step_scale = mixer.cfg.step_scale_rule()
        self._scale_set = 1.0  # what the trainer was last told (a trainer starts at its own rate)
        self.last_mixed = 0
        """Neighbour copies mixed at the last boundary (simnet charges their arithmetic)."""
        self._span_cache: list[tuple[int, int]] | None = None

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
        period = self.cadence.period.steps() if self.mixer.cfg.per_period else self.cadence.every
        scale = self.step_scale.value if ended is None else self.step_scale.period_ended(ended, k, period)
        if scale != self._scale_set:
            trainer.set_step_scale(scale)
            self._scale_set = scale
            self.metrics.set("step_scale", scale)
        with self.protocol.timing():
            due = self._gossip(trainer, stats, view, k, now, period)
        self.notify(stats.step, due)

    def _gossip(self, trainer: Trainer, stats: StepStats, view: MixView, k: int, now: float, period: int) -> bool:
        """Partners' steps, the mix and the publish hand-over (the training thread's protocol
        time); whether a publish was handed over."""
        if self.steps is not None and (partner := self.steps.take()) is not None:
            if trainer.capabilities.add_in_place:  # no parameter copy
                trainer.add_to_flat_params(partner)
            else:
                trainer.set_flat_params(trainer.get_flat_params().add_(partner))
            self._count_outside(partner, 0, partner.numel())
            self.metrics.inc("partner_steps_applied_total")
        if self.mixer.has_news(view):
            with self.view_slot.reading() as newest:  # the copies stay as they are while we read them
                report = self._mix(trainer, newest, k, now, period)
            if report.mixed:
                self.last_mixed = report.mixed
                self.metrics.inc("mixes_total", report.mixed)
                if report.clipped:
                    self.metrics.inc("mix_clipped_total", report.clipped)
                if report.radius is not None:
                    self.metrics.set("clip_radius", report.radius)
                for tau in report.staleness_steps:
                    self.metrics.observe("mixed_staleness_steps", tau)
                for key, distance in report.distances.items():
                    self.metrics.set("neighbour_distance", distance, peer=key.hex()[:16])
        due = self.cadence.due(k, now) and self.pending.ready()  # a busy worker: no copy, it comes later
        if due:  # a copy: the worker compresses it while training goes on
            self.cadence.published(k, now, self.protocol.take())
            self.metrics.set("publish_period_steps", self.cadence.period.steps())
            cadence_gauges.record(self.metrics, self.cadence.reading())
            bf16 = self.mixer.cfg.handover_bfloat16
            x = trainer.flat_params_bf16(self._rounding, self.device) if bf16 else trainer.get_flat_params()
            outside = None
            if self.steps is not None:
                outside = self._outside if self._outside is not None else torch.zeros_like(x)
            self.pending.put(x, stats.step, outside)
            self._outside = None
        return due

    def _mix(self, trainer: Trainer, view: MixView, k: int, now: float, period: int) -> MixReport:
        """Mix the news of `view` into the trainer's parameters (inside `ViewSlot.reading`)."""
        if trainer.capabilities.add_in_place:  # the change a span of whole tensors at a time: never built whole
            change, report = self.mixer.change(view, k, now, period)
            if report.mixed and change is not None:
                for start, n in self._spans(trainer):
                    piece = change.piece(slice(start, start + n))
                    trainer.add_to_flat_params(piece, start)
                    self._count_outside(piece, start, change.numel())
            return report
        x = trainer.get_flat_params().to(self.device)  # mixed where the copies are
        mixed, report = self.mixer.mix(x, view, k, now, period)
        if report.mixed:
            trainer.set_flat_params(mixed)
            self._count_outside(mixed - x, 0, x.numel())
        return report

    def _count_outside(self, delta: torch.Tensor, start: int, numel: int) -> None:
        """Add `delta`, entries `start` on of a change not of our own steps (already applied), to
        what the next hand-over reports."""
        if self.steps is not None:
            if self._outside is None:
                self._outside = torch.zeros(numel, dtype=torch.float32)
            self._outside[start:start + delta.numel()].add_(delta.reshape(-1))

    def _spans(self, trainer: Trainer) -> list[tuple[int, int]]:
        """(start, length) of runs of whole parameter tensors, each about `1 / MIX_SPANS` of the model
        (one tensor when it is larger): what one `add_to_flat_params` call adds."""
        if self._span_cache is None:
            sizes = [math.prod(shape) for shape, _ in trainer.param_spec().values()]
            target, spans, start, n = max(1, -(-sum(sizes) // MIX_SPANS)), [], 0, 0
            for size in sizes:
                if n and n + size > target:
                    spans.append((start, n))
                    start, n = start + n, 0
                n += size
            self._span_cache = spans + ([(start, n)] if n else [])
        return self._span_cache
