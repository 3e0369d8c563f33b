"""A group rank ends with `group_app.leave` once its run closed everything: what it printed and
logged is flushed, and a teardown that would abort (as gloo's threads have done at exit) never runs.

The abort is injected with an atexit handler: the control that exits the ordinary way dies of
it (SIGABRT), `leave` does not."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, logging, os, sys
    atexit.register(os.abort)  # stands in for a teardown that takes the finished rank down
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    print("stopped at step 3", end="")  # block-buffered: stdout is a pipe
    logging.getLogger("gossip_tts").warning("last words")
    if sys.argv[1] == "leave":
        from gossip_tts.apps.group_app import leave
        leave(0)
    sys.exit(0)
""")


def _run(how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, how], capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGABRT is a POSIX signal")
def test_leave_flushes_and_skips_a_teardown_that_would_abort() -> None:
    control = _run("exit")
    assert control.returncode == -signal.SIGABRT, control  # the injected teardown abort is real

    left = _run("leave")
    assert left.returncode == 0, left.stderr
    assert left.stdout == "stopped at step 3"
    assert "last words" in left.stderr
