"""A key that completes ticketed exchanges with a running peer, claiming to listen at terminal
escape sequences, never gets them onto the operator's screen: not through `gossip-tts status`,
not through the peer's own log (SECURITY.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gossip_tts.cli.terminal_text import printable
from tests.adversarial.conftest import Forger, metric, read_state, source_ip, status

pytestmark = pytest.mark.slow

HOSTILE_LISTENS = [
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]0;owned\x07",  # set the window title
    "127.0.0.1:1\r  ffffffffffffffff  10.0.0.1:1  forged",  # rewrite the line
    "127.0.0.1:1\n  ffffffffffffffff  10.0.0.1:1  forged",  # add a row
    "\x9b2J",  # 8-bit CSI
]


def _raw(text: str) -> list[str]:
    return [c for c in text if c != "\n" and printable(c) != c]


def test_a_hostile_listen_never_reaches_the_terminal(peers):
    v = peers("victim")
    base = f"http://{v.wait_listening()}"
    v.wait_for(r"^step \d+ ", timeout=120)
    fingerprint, x = read_state(base, status(base)["swarm"])
    codes = []
    for i, listen in enumerate(HOSTILE_LISTENS):
        forger = Forger(status(base)["swarm"], fingerprint, x.clone(), listen=listen)
        # a first contact, then the exchange that would store the listen; each key from an address
        # of its own, as separate attackers: one address's refused frames soon meet its stranger rate
        codes.append(forger.push(base, source=source_ip(i)))
    shown = subprocess.run([sys.executable, "-m", "gossip_tts", "status", v.address], capture_output=True,
                           text=True, timeout=60, env={**os.environ})
    assert shown.returncode == 0, shown.stderr
    assert not _raw(shown.stdout), shown.stdout
    assert "forged" not in shown.stdout  # refused where it entered, not merely escaped
    assert not _raw(v.log_path.read_text())
    assert codes == [400] * len(HOSTILE_LISTENS)  # each refused at its first contact
    assert metric(base, 'gossip_tts_frames_refused_total{reason="bad_header"}') >= len(HOSTILE_LISTENS)
