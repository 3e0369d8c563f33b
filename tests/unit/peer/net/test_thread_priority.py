"""The network side's threads run at a lower priority than training (`NetConfig.network_nice`)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from peer.net.config import NetConfig
from peer.net.thread_priority import NICE_MAX, lower_this_thread

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _in_a_thread(fn):
    """Run `fn` in a fresh thread (a raised nice value cannot be lowered again) and return its result."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


@linux_only
def test_the_calling_thread_is_lowered_and_the_threads_it_starts_inherit_it() -> None:
    base = _nice()

    def lowered() -> tuple[str | None, int, int]:
        why = lower_this_thread(5)
        child = _in_a_thread(_nice)
        return why, _nice(), child

    why, mine, child = _in_a_thread(lowered)
    assert why is None
    assert mine == child == min(NICE_MAX, base + 5)
    assert _nice() == base  # other threads (training's) keep theirs


@linux_only
def test_the_nice_value_stops_at_its_floor() -> None:
    assert _in_a_thread(lambda: (lower_this_thread(NICE_MAX), lower_this_thread(NICE_MAX), _nice())[2]) == NICE_MAX


def test_zero_changes_nothing() -> None:
    assert _in_a_thread(lambda: (lower_this_thread(0), _nice())) == (None, _nice())


def test_elsewhere_the_reason_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    why = _in_a_thread(lambda: lower_this_thread(10))
    assert why is not None and "per process on darwin" in why


@pytest.mark.parametrize("nice", [-1, 20])
def test_a_nice_outside_the_kernels_range_is_refused(nice: int) -> None:
    with pytest.raises(ValueError, match="network_nice must be within 0..19"):
        NetConfig(network_nice=nice)
