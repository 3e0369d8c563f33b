"""The local training loop: steps a Trainer, reports progress, checkpoints on a timer.

It knows nothing of models or networks. Gossip plugs in through `hooks`, which run at step
boundaries (the only moments parameters may be read or replaced).
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from peer import cadence_gauges
from peer.local.checkpoint import KEEP, BackgroundCheckpointer, CheckpointError, checkpoint_path, load_newest_good
from peer.local.guard import PoisonGuard
from peer.local.config import LoopConfig
from peer.metrics import Metrics
from peer.local.status_history import LossHistory
from peer.trainer import StepStats, Trainer

LOSS_HISTORY_KEY = "loss_history"
"""Checkpoint metadata key of the status page's loss curve (`LossHistory.to_json`)."""

__all__ = ["GossipRates", "LoopConfig", "LoopResult", "ProgressMeter", "StepHook", "record_step", "resume_if_asked", "run_loop"]

log = logging.getLogger(__name__)

StepHook = Callable[[Trainer, StepStats], None]


@dataclass
class LoopResult:
    steps: int  # the trainer's step count at the end
    last_loss: float | None
    interrupted: bool
    checkpoints_written: int
    history: list[StepStats] = field(default_factory=list)


class ProgressMeter:
    """Turns step stats into progress lines: step, loss, samples/s, audio-seconds/s.

    Given the peer's `metrics`, a line also says how the gossip goes (`GossipRates`). The
    first line comes right after the first step, so a starting peer shows at once that it
    trains, not only after a whole `every_s`; then one line every `every_s`.
    """

    def __init__(self, clock: Callable[[], float], every_s: float, emit: Callable[[str], None],
                 metrics: Metrics | None = None) -> None:
        self._clock, self._every, self._emit = clock, every_s, emit
        self._t0 = clock()
        self._samples = 0
        self._audio = 0.0
        self._losses: list[float] = []
        self._first = True
        self._gossip = GossipRates(metrics) if metrics is not None else None

    def update(self, stats: StepStats, suffix: str = "") -> None:
        self._samples += stats.samples
        self._audio += stats.audio_seconds
        self._losses.append(stats.loss)
        now = self._clock()
        dt = now - self._t0
        if dt < self._every and not self._first:
            return
        self._first = False
        per_s = 1 / dt if dt > 0 else 0.0
        extra = " ".join(f"{k} {v:.3g}" for k, v in stats.extra.items())
        gossip = self._gossip.line(dt) if self._gossip is not None else ""
        self._emit(
            f"step {stats.step} loss {sum(self._losses) / len(self._losses):.4f} "
            f"samples/s {self._samples * per_s:.1f} audio-s/s {self._audio * per_s:.1f} {gossip} {extra}".rstrip()
            + suffix
        )
        self._t0, self._samples, self._audio, self._losses = now, 0, 0.0, []


class GossipRates:
    """The gossip part of a progress line, from the peer's `Metrics` (thread-safe reads).

    neighbours (copies held), exchanges/s (completed on either side), bytes/s in and out of
    exchange bodies, the median staleness (in steps) of the copies mixed since the last
    line, the consensus distance (RMS distance to the mean of our parameters and the
    copies we hold; refreshed by the status service, '-' until first computed), our
    measured steps per publish, the period the mixing rule counts in ('-' before a publish),
    and the cadence's aim and reason (`peer.core.publish_budget.CadenceReading.reason`).
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._prev = self._totals()

    def _totals(self) -> tuple[float, float, float, float]:
        m = self.metrics
        return m.total("exchanges_total"), m.total("bytes_received_total"), m.total("bytes_sent_total"), m.total("mixes_total")

    def line(self, dt: float) -> str:
        now = self._totals()
        exchanges, bytes_in, bytes_out, mixes = (a - b for a, b in zip(now, self._prev))
        self._prev = now
        per_s = 1 / dt if dt > 0 else 0.0
        recent = self.metrics.recent("mixed_staleness_steps")[-int(mixes):] if mixes >= 1 else []
        staleness = f"{statistics.median(recent):.3g}" if recent else "-"
        consensus = next((v for name, _, v in self.metrics.series() if name == "consensus_distance"), None)
        return (f"neighbours {int(self.metrics.get('neighbours'))} exchanges/s {exchanges * per_s:.2f} "
                f"in {_bytes_per_s(bytes_in * per_s)} out {_bytes_per_s(bytes_out * per_s)} "
                f"staleness {staleness} consensus {'-' if consensus is None else f'{consensus:.4g}'} "
                f"publish every {self._period()}")

    def _period(self) -> str:
        steps = self.metrics.get("publish_period_steps")
        period = "-" if not steps else "step" if steps == 1 else f"{int(steps)} steps"
        cadence = cadence_gauges.read(self.metrics)
        return period if cadence is None else f"{period} ({cadence.reason()})"


def _bytes_per_s(rate: float) -> str:
    for unit in ("B", "kB", "MB"):
        if rate < 1000:
            return f"{rate:.0f}{unit}/s" if unit == "B" else f"{rate:.1f}{unit}/s"
        rate /= 1000
    return f"{rate:.1f}GB/s"


def record_step(metrics: Metrics, stats: StepStats, step_s: float, boundary_s: float) -> None:
    """Per-step figures for /metrics: step and boundary time, audio trained on."""
    metrics.observe("step_seconds", step_s)
    metrics.observe("boundary_seconds", boundary_s)
    metrics.inc("audio_seconds_total", stats.audio_seconds)


def resume_if_asked(trainer: Trainer, cfg: LoopConfig,
                    emit: Callable[[str], None]) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """Load the checkpoint when `--resume` was given; a missing one starts fresh, a bad one fails loudly.

    Returns what was loaded (the caller may restore more from it: a peer's averaged weights)."""
    if not cfg.resume or cfg.checkpoint_dir is None:
        return None
    if not any(checkpoint_path(cfg.checkpoint_dir, age).exists() for age in range(KEEP)):
        emit(f"no checkpoint in {cfg.checkpoint_dir}; starting fresh")
        return None
    try:
        tensors, meta, path, skipped = load_newest_good(cfg.checkpoint_dir)
    except CheckpointError as exc:
        raise CheckpointError(f"cannot --resume from {cfg.checkpoint_dir}: {exc}; move the damaged file(s) away, "
                              "or start a new run with another --checkpoint-dir") from exc
    for reason in skipped:
        emit(f"skipped a checkpoint: {reason}")
    try:
        trainer.load_state_tensors(tensors, meta)
    except (KeyError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit this model: {exc}; pass the --preset it was "
                              "trained with, or another --checkpoint-dir for a new run") from exc
    emit(f"resumed from {path} at step {trainer.step_count}")
    return tensors, meta


def run_loop(
    trainer: Trainer,
    cfg: LoopConfig,
    *,
    stop: threading.Event | None = None,
    hooks: Sequence[StepHook] = (),
    clock: Callable[[], float] = time.monotonic,
    emit: Callable[[str], None] = print,
    keep_history: bool = False,
    metrics: Metrics | None = None,
    loss_history: LossHistory | None = None,
    extra_state: Callable[[], tuple[dict[str, torch.Tensor], dict[str, Any]]] | None = None,
    restore_extra: Callable[[dict[str, torch.Tensor], dict[str, Any]], Any] | None = None,
) -> LoopResult:
    """Train until `max_steps`, `stop` is set, or Ctrl+C; always leave a final checkpoint.

    Any other exception propagates only after the checkpoint writes already submitted are on
    disk; the state it leaves is not saved (it may be half-stepped), so the last good one stays.

    With `metrics` (a gossiping peer's), progress lines carry the gossip figures and every
    step is recorded for /metrics (`record_step`); with `loss_history`, for /v1/status's loss curve,
    which checkpoints carry and a resume takes back. `extra_state` adds tensors
    and metadata to every checkpoint beside the trainer's (a peer's averaged weights), and
    `restore_extra` is handed a resumed checkpoint to take them back.
    """

    def snapshot() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        tensors, meta = trainer.state_tensors()
        if extra_state is not None:
            more, more_meta = extra_state()
            tensors, meta = {**tensors, **more}, {**meta, **more_meta}
        if loss_history is not None:  # the page's loss curve, so that after --resume it spans the whole run
            meta = {**meta, LOSS_HISTORY_KEY: loss_history.to_json()}
        return tensors, meta

    stop = stop or threading.Event()
    resumed = resume_if_asked(trainer, cfg, emit)
    if resumed is not None and restore_extra is not None:
        restore_extra(*resumed)
    if resumed is not None and loss_history is not None:
        loss_history.restore(resumed[1].get(LOSS_HISTORY_KEY))
    writer = BackgroundCheckpointer(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    meter = ProgressMeter(clock, cfg.log_every_s, emit, metrics)
    guard = PoisonGuard(trainer, cfg.good_state_every_steps, cfg.rollback_lr_factor, emit,
                        (lambda name: metrics.inc(name)) if metrics else (lambda name: None))
    last_ckpt = clock()
    last_loss: float | None = None
    kept: list[StepStats] = []
    interrupted = False
    try:
        while not stop.is_set():
            if cfg.max_steps is not None and trainer.step_count >= cfg.max_steps:
                break
            t0 = time.perf_counter()  # real time even when `clock` is a test's
            stats = trainer.step()
            t1 = time.perf_counter()
            if guard.check(stats):
                continue  # the step was poisoned: nothing of it is mixed, published or saved
            last_loss = stats.loss
            if keep_history:
                kept.append(stats)
            for hook in hooks:
                hook(trainer, stats)
            if metrics is not None:
                record_step(metrics, stats, t1 - t0, time.perf_counter() - t1)
            if loss_history is not None:
                loss_history.add(stats.step, stats.loss, time.time(), stats.audio_seconds)
            meter.update(stats)
            if writer is not None and clock() - last_ckpt >= cfg.checkpoint_every_s:
                writer.submit(*snapshot())
                last_ckpt = clock()
    except KeyboardInterrupt:
        interrupted = True
        emit("interrupted; writing a final checkpoint" if writer else "interrupted")
    except BaseException:
        # The state may be half-stepped or poisoned: save nothing new, but let the write under way
        # finish, so no half-written file or half-rotated checkpoint.N is left to the next --resume.
        _finish(writer)
        raise
    if writer is not None:
        try:
            writer.submit(*snapshot())
        finally:
            _finish(writer)
    return LoopResult(trainer.step_count, last_loss, interrupted, writer.written if writer else 0, kept)


def _finish(writer: BackgroundCheckpointer | None) -> None:
    """Wait until every snapshot submitted is on disk (or failed), and log a failure."""
    if writer is None:
        return
    writer.flush()
    if writer.last_error is not None:
        log.error("checkpoint write failed: %s", writer.last_error)
