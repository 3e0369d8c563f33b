"""Checkpoint → kill -9 → --resume continues from the checkpointed step."""

import re
import signal
import time

import pytest

from peer.local.checkpoint import load_checkpoint
from tests.integration.conftest import tiny_args
from tests.integration.peers import last_step

pytestmark = pytest.mark.slow  # real peer processes killed and resumed: run by .ci/run's slow section


def test_kill_then_resume_continues_from_the_same_step(corpus, spawn, tmp_path):
    ckpt = tmp_path / "ckpt"
    first = spawn("first", *tiny_args(corpus["shard0"], ckpt, "--solo", "--checkpoint-every", "0.5", steps=100000))
    first.wait_for(r"^step \d+ ", timeout=180)
    # wait until a checkpoint from a later step than 5 exists, then kill without warning
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            step = load_checkpoint(ckpt)[1]["step"]
            if step >= 5:
                break
        except Exception:
            pass
        time.sleep(0.2)
    first.kill(signal.SIGKILL)
    saved_step = load_checkpoint(ckpt)[1]["step"]  # the last good checkpoint is loadable after kill -9
    assert saved_step >= 5

    second = spawn("second", *tiny_args(corpus["shard0"], ckpt, "--solo", "--resume", steps=saved_step + 5))
    assert second.wait_exit(180) == 0, second.text()
    text = second.text()
    assert f"at step {saved_step}" in text and "resumed from" in text, text
    assert f"stopped at step {saved_step + 5}" in text, text
    assert load_checkpoint(ckpt)[1]["step"] == saved_step + 5
    assert last_step(text) <= saved_step + 5


def test_ctrl_c_and_sigterm_stop_cleanly_with_a_final_checkpoint(corpus, spawn, tmp_path):
    for sig in (signal.SIGINT, signal.SIGTERM):
        ckpt = tmp_path / f"ckpt-{sig.name}"
        p = spawn(sig.name, *tiny_args(corpus["shard0"], ckpt, "--listen", "127.0.0.1:0", "--no-mdns", steps=100000))
        p.wait_listening()
        p.wait_for(r"^step \d+ ", timeout=120)
        p.proc.send_signal(sig)
        try:
            code = p.wait_exit(60)
        except AssertionError as still_running:
            raise AssertionError(f"after {sig.name}: {still_running}") from None
        assert code == 0, f"after {sig.name}: {p.text()[-2000:]}"
        stopped = int(re.search(r"stopped at step (\d+)", p.text()).group(1))
        assert load_checkpoint(ckpt)[1]["step"] == stopped
