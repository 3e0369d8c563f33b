"""run_loop ending on an error must not abandon a checkpoint write still in flight (peer/local/loop.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import peer.local.checkpoint as checkpoint
from peer.local.checkpoint import load_newest_good
from peer.local.loop import LoopConfig, run_loop
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer


class Boom(RuntimeError):
    pass


def _slow_writes(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event, list[int]]:
    """Make every checkpoint write wait for `release`; `started` is set when the first one begins."""
    started, release, steps = threading.Event(), threading.Event(), []
    real = checkpoint.save_checkpoint

    def slow(directory, tensors, meta, keep=checkpoint.KEEP):
        started.set()
        assert release.wait(5), "the test never released the write"
        path = real(directory, tensors, meta, keep)
        steps.append(meta["step"])
        return path

    monkeypatch.setattr(checkpoint, "save_checkpoint", slow)
    return started, release, steps


def test_an_error_waits_for_the_write_in_flight_and_submits_nothing_new(tmp_path: Path, monkeypatch) -> None:
    started, release, steps = _slow_writes(monkeypatch)
    trainer = LeastSquaresTrainer(LeastSquaresConfig(dim=8, samples_per_shard=32))

    def failing_hook(tr, stats):
        if stats.step == 3:
            assert started.wait(5)  # a periodic write is under way
            threading.Timer(0.3, release.set).start()
            raise Boom("hook failed")

    cfg = LoopConfig(checkpoint_dir=tmp_path, checkpoint_every_s=1e-9, log_every_s=1e9)
    with pytest.raises(Boom):
        run_loop(trainer, cfg, hooks=[failing_hook], emit=lambda s: None)
    assert release.is_set()  # run_loop waited for the slow write instead of raising at once
    # the newest snapshot submitted is written (step 1's may have been replaced by step 2's before
    # the writer took it); nothing of the failed step 3 is
    assert steps in ([1, 2], [2])
    tensors, meta, path, skipped = load_newest_good(tmp_path)
    assert meta["step"] == 2 and path.name == checkpoint.CHECKPOINT_NAME and not skipped
    assert not list(tmp_path.glob(".*.tmp"))  # no half-written file left behind


def test_a_failing_trainer_step_also_waits(tmp_path: Path, monkeypatch) -> None:
    started, release, steps = _slow_writes(monkeypatch)
    trainer = LeastSquaresTrainer(LeastSquaresConfig(dim=8, samples_per_shard=32))
    step = trainer.step

    def failing_step():
        if trainer.step_count == 2:
            assert started.wait(5)
            threading.Timer(0.3, release.set).start()
            raise Boom("step failed")
        return step()

    trainer.step = failing_step
    cfg = LoopConfig(checkpoint_dir=tmp_path, checkpoint_every_s=1e-9, log_every_s=1e9)
    with pytest.raises(Boom):
        run_loop(trainer, cfg, emit=lambda s: None)
    assert release.is_set() and steps in ([1, 2], [2])
    assert load_newest_good(tmp_path)[1]["step"] == 2
