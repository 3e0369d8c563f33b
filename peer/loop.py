"""The local training loop: steps a Trainer, reports progress, checkpoints on a timer.

It knows nothing of models or networks. Gossip plugs in through `hooks`, which run at step
boundaries (the only moments parameters may be read or replaced).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from peer.checkpoint import BackgroundCheckpointer, CheckpointError, checkpoint_path, load_checkpoint
from peer.trainer import StepStats, Trainer

log = logging.getLogger(__name__)

StepHook = Callable[[Trainer, StepStats], None]


@dataclass
class LoopConfig:
    max_steps: int | None = None
    """Stop once the trainer's step count reaches this; None trains until stopped."""
    checkpoint_dir: Path | None = None
    """Where `checkpoint.safetensors` lives; None disables checkpoints."""
    checkpoint_every_s: float = 300.0
    """Seconds between background checkpoints (a final one is always written on exit)."""
    resume: bool = False
    """Load `checkpoint_dir`'s checkpoint before training, if there is one."""
    log_every_s: float = 5.0
    """Seconds between progress lines."""

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {self.max_steps}")
        if self.checkpoint_every_s <= 0:
            raise ValueError(f"checkpoint_every_s must be > 0, got {self.checkpoint_every_s}")
        if self.log_every_s < 0:
            raise ValueError(f"log_every_s must be >= 0, got {self.log_every_s}")
        if self.resume and self.checkpoint_dir is None:
            raise ValueError("resume needs a checkpoint directory")
        if self.checkpoint_dir is not None:
            self.checkpoint_dir = Path(self.checkpoint_dir)


@dataclass
class LoopResult:
    steps: int  # the trainer's step count at the end
    last_loss: float | None
    interrupted: bool
    checkpoints_written: int
    history: list[StepStats] = field(default_factory=list)


class ProgressMeter:
    """Turns step stats into rate lines: step, loss, samples/s, audio-seconds/s."""

    def __init__(self, clock: Callable[[], float], every_s: float, emit: Callable[[str], None]) -> None:
        self._clock, self._every, self._emit = clock, every_s, emit
        self._t0 = clock()
        self._samples = 0
        self._audio = 0.0
        self._losses: list[float] = []

    def update(self, stats: StepStats, suffix: str = "") -> None:
        self._samples += stats.samples
        self._audio += stats.audio_seconds
        self._losses.append(stats.loss)
        now = self._clock()
        dt = now - self._t0
        if dt < self._every:
            return
        extra = " ".join(f"{k} {v:.3g}" for k, v in stats.extra.items())
        self._emit(
            f"step {stats.step} loss {sum(self._losses) / len(self._losses):.4f} "
            f"samples/s {self._samples / dt:.1f} audio-s/s {self._audio / dt:.1f} {extra}{suffix}".rstrip()
        )
        self._t0, self._samples, self._audio, self._losses = now, 0, 0.0, []


def resume_if_asked(trainer: Trainer, cfg: LoopConfig, emit: Callable[[str], None]) -> None:
    """Load the checkpoint when `--resume` was given; a missing one starts fresh, a bad one fails loudly."""
    if not cfg.resume or cfg.checkpoint_dir is None:
        return
    path = checkpoint_path(cfg.checkpoint_dir)
    if not path.exists():
        emit(f"no checkpoint at {path}; starting fresh")
        return
    tensors, meta = load_checkpoint(path)
    try:
        trainer.load_state_tensors(tensors, meta)
    except (KeyError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit this model: {exc}") from exc
    emit(f"resumed from {path} at step {trainer.step_count}")


def run_loop(
    trainer: Trainer,
    cfg: LoopConfig,
    *,
    stop: threading.Event | None = None,
    hooks: Sequence[StepHook] = (),
    clock: Callable[[], float] = time.monotonic,
    emit: Callable[[str], None] = print,
    keep_history: bool = False,
) -> LoopResult:
    """Train until `max_steps`, `stop` is set, or Ctrl+C; always leave a final checkpoint."""
    stop = stop or threading.Event()
    resume_if_asked(trainer, cfg, emit)
    writer = BackgroundCheckpointer(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    meter = ProgressMeter(clock, cfg.log_every_s, emit)
    last_ckpt = clock()
    last_loss: float | None = None
    history: list[StepStats] = []
    interrupted = False
    try:
        while not stop.is_set():
            if cfg.max_steps is not None and trainer.step_count >= cfg.max_steps:
                break
            stats = trainer.step()
            last_loss = stats.loss
            if keep_history:
                history.append(stats)
            for hook in hooks:
                hook(trainer, stats)
            meter.update(stats)
            if writer is not None and clock() - last_ckpt >= cfg.checkpoint_every_s:
                writer.submit(*trainer.state_tensors())
                last_ckpt = clock()
    except KeyboardInterrupt:
        interrupted = True
        emit("interrupted; writing a final checkpoint" if writer else "interrupted")
    written = 0
    if writer is not None:
        writer.submit(*trainer.state_tensors())
        writer.flush()
        written = writer.written
        if writer.last_error is not None:
            log.error("checkpoint write failed: %s", writer.last_error)
    return LoopResult(trainer.step_count, last_loss, interrupted, written, history)
