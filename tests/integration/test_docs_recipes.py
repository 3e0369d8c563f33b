"""The README's quick start and docs/quickstart.md's one-machine and config recipes run as
written, each after the one before, the way a new user types them (on 127.0.0.1 only).

The commands are read from the docs themselves, so a recipe that stops working (a second
peer reusing a folder the first one holds, a config file that points at a used run) fails
here. Long-running peers are stopped with Ctrl+C (SIGINT) once they print what the docs
say success looks like. The environment keeps every peer on loopback (GOSSIP_TTS_NET_LISTEN,
GOSSIP_TTS_NET_MDNS_INTERFACES): flags written in a recipe still beat it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.peers import STAMP_RE

ROOT = Path(__file__).resolve().parents[2]
STEP = r"^step \d+ loss"
STARTUP_S = 300  # a small-preset peer on 2 busy cores takes 10-60 s to its first step


def bash_commands(markdown: str, section: str) -> list[str]:
    """The `gossip-tts …` commands of the bash blocks under `## section`, comments dropped."""
    body = markdown.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", body, re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                command = re.sub(r"\s+#.*$", "", part).strip()
                if "gossip-tts " in command:
                    out.append(command)
    return out


def _as_in_a_terminal() -> None:
    """Ctrl+C reaches the command even when the test runner was started with SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Shell:
    """One command typed into a terminal in `cwd`, with `gossip-tts` the CLI of this checkout."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str], log: Path) -> None:
        self.command = command
        self.log = log
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_as_in_a_terminal)

    def text(self) -> str:
        return STAMP_RE.sub("", self.log.read_text())

    def wait_for(self, pattern: str, timeout: float = STARTUP_S) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text(), re.M):
            assert self.proc.poll() is None, f"{self.command!r} ended ({self.proc.returncode}):\n{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"{self.command!r}: no {pattern!r} in {timeout} s:\n{self.text()[-3000:]}"
            time.sleep(0.2)

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)
        self.proc.wait(120)
        assert "stopped at step" in self.text(), self.text()[-3000:]

    def finish(self) -> None:
        assert self.proc.wait(120) == 0, f"{self.command!r}:\n{self.text()[-3000:]}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def terminal(tmp_path):
    shim = tmp_path / "bin" / "gossip-tts"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gossip_tts "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}",
           "GOSSIP_TTS_NET_LISTEN": "127.0.0.1:0", "GOSSIP_TTS_NET_MDNS_INTERFACES": "127.0.0.1"}
    work = tmp_path / "clone"
    work.mkdir()
    opened: list[Shell] = []

    def open_terminal(command: str) -> Shell:
        opened.append(Shell(command, work, env, tmp_path / f"terminal-{len(opened)}.log"))
        return opened[-1]

    yield open_terminal
    for shell in opened:
        shell.kill()


@pytest.mark.slow
def test_quick_start_then_every_one_machine_and_config_recipe_runs_as_written(terminal):
    readme = (ROOT / "README.md").read_text()
    quickstart = (ROOT / "docs" / "quickstart.md").read_text()
    first_peer = bash_commands(readme, "Quick start")
    assert first_peer == ["gossip-tts peer"], first_peer
    readme_peer = terminal(first_peer[0])
    readme_peer.wait_for(r"^listening on http://127\.0\.0\.1:\d+ ")
    readme_peer.wait_for(STEP)  # and it goes on running while the next recipes are tried

    one_machine = bash_commands(quickstart, "One machine")
    assert one_machine[0] == first_peer[0]  # the same first peer, already running
    loopback = terminal(one_machine[1])
    assert "--listen 127.0.0.1:0 --no-mdns" in loopback.command
    loopback.wait_for(STEP)
    loopback.ctrl_c()
    first, second = (terminal(c) for c in one_machine[2:4])
    first.wait_for(STEP)
    for peer in (first, second):
        peer.wait_for(r"^step \d+ loss .* neighbours 1 exchanges/s (?!0\.00 )\d")
    for peer in (second, first, readme_peer):
        peer.ctrl_c()
    assert len(one_machine) == 4, one_machine

    config = bash_commands(quickstart, "Configure like other tools")
    assert [c.split()[0] for c in config] == ["gossip-tts", "gossip-tts", "GOSSIP_TTS_TRAIN_BATCH_SIZE=4"], config
    terminal(config[0]).finish()
    configured = terminal(config[1])
    configured.wait_for(STEP)
    configured.ctrl_c()
    again = terminal(config[2])
    again.wait_for(r"^resumed from ")
    again.wait_for(STEP)
    again.ctrl_c()
