"""A peer piped to a file shows its lines while it runs (not at exit), timestamped, and as JSON lines."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.peers import STAMP_RE

STAMP = STAMP_RE.pattern


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern, re.M)
    while time.monotonic() < deadline:
        text = path.read_text()
        if rx.search(text):
            return text
        assert proc.poll() is None, f"peer exited ({proc.returncode}) before {pattern!r}:\n{text[-3000:]}"
        time.sleep(0.1)
    raise AssertionError(f"no {pattern!r} within {timeout} s while the peer runs:\n{path.read_text()[-3000:]}")


def test_lines_reach_a_pipe_while_the_peer_runs(tmp_path, corpus):
    log, json_log = tmp_path / "peer.log", tmp_path / "peer.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a service manager runs it
    args = [sys.executable, "-m", "gossip_tts", "peer", "--preset", "tiny", "--device", "cpu", "--threads", "1",
            "--no-mdns", "--listen", "127.0.0.1:0", "--data", str(corpus["shard0"]), "--checkpoint-dir", str(tmp_path / "ckpt"),
            "--batch-size", "4", "--log-every", "0.5", "--log-json", str(json_log)]
    with open(log, "w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp_path)
    try:
        text = _wait_for(log, r"listening on http://127\.0\.0\.1:\d+ peer_id=[0-9a-f]{64}", proc, timeout=30)
        first = text.splitlines()[0]
        assert re.match(STAMP + "gossip-tts peer starting: preset tiny, device cpu", first), first
        assert all(re.match(STAMP, line) for line in text.splitlines() if line.strip()), text
        _wait_for(log, STAMP + r"step \d+ loss", proc, timeout=90)  # progress too, before exit
        rows = [json.loads(line) for line in json_log.read_text().splitlines()]
        assert any(r["message"].startswith("listening on http://127.0.0.1:") for r in rows)
        assert {"time", "level", "logger", "message"} <= set(rows[0])
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
