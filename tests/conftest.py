"""What every test run shares: the quick suites first, and signal handlers left as they were.

Collected in folder order, `pytest` would start with tests/adversarial and tests/integration
and a newcomer would wait minutes before the first of the many quick unit tests. And a peer
run in-process installs a SIGTERM handler and takes Ctrl+C as "stop after this step": left
as they are, pytest ignores SIGTERM and goes on to the next test after Ctrl+C.

Imports nothing heavy: tests/unit/project/test_test_run.py loads it as a plugin in a small
subprocess run.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

import pytest

SUITES = ("unit", "sim", "integration", "adversarial")
"""The folders under tests/ in the order the default run takes them: quickest first."""
ONE_THREAD_SUITES = ("unit", "sim")
"""Suites whose tensor work is small and in-process: torch's second thread only waits for the
first there, and on a busy 2-core machine (CI's niced simulator streams) its spinning costs
2-5x the CPU of one thread."""
_TESTS = Path(__file__).resolve().parent
_HANDLED = (signal.SIGINT, signal.SIGTERM)


def suite_of(path: Path) -> str | None:
    """The folder under tests/ that holds `path` (None outside tests/)."""
    try:
        return Path(path).resolve().relative_to(_TESTS).parts[0]
    except (ValueError, IndexError):
        return None


def suite_rank(path: Path) -> int:
    """Where a test file's suite comes in SUITES; files elsewhere come after them all."""
    folder = suite_of(path)
    return SUITES.index(folder) if folder in SUITES else len(SUITES)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """unit → sim → integration → adversarial; a stable sort, so each file keeps its order."""
    items.sort(key=lambda item: suite_rank(item.path))


class CtrlC:
    """SIGINT during a test, raised as Python raises it and remembered: code under test that
    takes KeyboardInterrupt as a graceful stop (the training loop) must not keep pytest going."""

    def __init__(self) -> None:
        self.pressed = False

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        self.pressed = True
        raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def signal_handlers_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """SIGINT and SIGTERM handlers as they were before each test; a Ctrl+C seen during the test
    stops the run after it, with its summary."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in _HANDLED}
    ctrl_c = CtrlC()
    if saved[signal.SIGINT] is signal.default_int_handler:  # where SIGINT is ignored, it stays ignored
        signal.signal(signal.SIGINT, ctrl_c)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, handler)
        if ctrl_c.pressed:
            request.session.shouldstop = "Ctrl+C during a test"


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    """One torch thread for each module of ONE_THREAD_SUITES, restored after it; module-wide so
    that the module's own fixtures (a simulated swarm shared by its tests) run on it too."""
    if suite_of(request.path) not in ONE_THREAD_SUITES:
        yield
        return
    from peer.torch_threads import one_torch_thread  # here: this file imports nothing heavy

    with one_torch_thread():
        yield
