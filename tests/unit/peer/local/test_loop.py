import threading

import pytest
import torch

from peer.local.checkpoint import load_checkpoint
from peer.local.loop import LoopConfig, run_loop
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer


def make_trainer(**kw):
    return LeastSquaresTrainer(LeastSquaresConfig(dim=8, samples_per_shard=32, **kw))


def test_loop_trains_and_stops_at_max_steps():
    trainer = make_trainer()
    result = run_loop(trainer, LoopConfig(max_steps=200, log_every_s=0), emit=lambda s: None, keep_history=True)
    assert result.steps == 200 and len(result.history) == 200
    first = sum(s.loss for s in result.history[:10]) / 10
    last = sum(s.loss for s in result.history[-10:]) / 10
    assert last < 0.1 * first


def test_resume_continues_from_the_same_step_and_state(tmp_path):
    cfg = LoopConfig(max_steps=50, checkpoint_dir=tmp_path, log_every_s=1e9)
    straight = make_trainer()
    run_loop(straight, LoopConfig(max_steps=80, log_every_s=1e9), emit=lambda s: None)

    first = make_trainer()
    assert run_loop(first, cfg, emit=lambda s: None).steps == 50
    _, meta = load_checkpoint(tmp_path)
    assert meta["step"] == 50

    lines: list[str] = []
    second = make_trainer()
    result = run_loop(second, LoopConfig(max_steps=80, checkpoint_dir=tmp_path, resume=True, log_every_s=1e9), emit=lines.append)
    assert any("resumed" in line and "step 50" in line for line in lines)
    assert result.steps == 80
    # resuming restored weights and RNG, so it matches an uninterrupted run exactly
    assert torch.equal(second.w, straight.w)


def test_stop_event_and_keyboard_interrupt_end_cleanly_with_a_checkpoint(tmp_path):
    stop = threading.Event()
    trainer = make_trainer()
    calls = []

    def hook(tr, stats):
        calls.append(stats.step)
        if stats.step == 5:
            stop.set()

    result = run_loop(trainer, LoopConfig(checkpoint_dir=tmp_path), stop=stop, hooks=[hook], emit=lambda s: None)
    assert result.steps == 5 and calls == [1, 2, 3, 4, 5] and result.checkpoints_written == 1

    def interrupting_hook(tr, stats):
        if stats.step == 8:
            raise KeyboardInterrupt

    result = run_loop(trainer, LoopConfig(checkpoint_dir=tmp_path), hooks=[interrupting_hook], emit=lambda s: None)
    assert result.interrupted and result.steps == 8
    assert load_checkpoint(tmp_path)[1]["step"] == 8


def test_progress_lines_report_rates():
    t = [0.0]

    def clock():
        t[0] += 0.5
        return t[0]

    lines: list[str] = []
    run_loop(make_trainer(), LoopConfig(max_steps=10, log_every_s=1.0), clock=clock, emit=lines.append)
    assert lines and all("samples/s" in line and "loss" in line for line in lines)
    assert "samples/s 16.0" in lines[0]


def test_config_is_validated():
    with pytest.raises(ValueError, match="resume needs"):
        LoopConfig(resume=True)
    with pytest.raises(ValueError, match="max_steps"):
        LoopConfig(max_steps=-1)
