"""Starting real `gossip-tts peer` processes on 127.0.0.1 and reading what they print."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

LISTEN_RE = re.compile(r"listening on http://(\S+) peer_id=([0-9a-f]{64})")
STAMP_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ", re.M)  # the CLI's log-line timestamp


class PeerProcess:
    """`python -m gossip_tts peer ARGS`, or `python -m LAUNCHER... peer ARGS` where `launcher`
    names a module that runs the same command its own way (tests.adversarial.lying_peer)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None,
                 launcher: list[str] | None = None) -> None:
        self.log_path = log
        self._log = open(log, "w")
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *(launcher or ["gossip_tts"]), "peer", *args],
            stdout=self._log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True,
        )
        self.address = ""
        self.peer_id = ""

    def text(self) -> str:
        """The log without line timestamps, so patterns can anchor at `^step`."""
        return STAMP_RE.sub("", self.log_path.read_text())

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern, re.M)
        while time.monotonic() < deadline:
            m = rx.search(self.text())
            if m:
                return m
            if self.proc.poll() is not None:
                m = rx.search(self.text())
                if m:
                    return m
                raise AssertionError(f"peer exited ({self.proc.returncode}) before {pattern!r}:\n{self.text()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} within {timeout} s:\n{self.text()[-3000:]}")

    def wait_listening(self, timeout: float = 120) -> str:
        m = self.wait_for(LISTEN_RE.pattern, timeout)
        self.address, self.peer_id = m.group(1), m.group(2)
        return self.address

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"peer still running after {timeout} s:\n{self.text()[-3000:]}") from None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(30)
        self._log.close()


def last_step(text: str) -> int:
    steps = re.findall(r"^step (\d+) ", text, flags=re.M)
    return int(steps[-1]) if steps else 0
