"""Prefetcher: a queue bounded in bytes as well as items, and a consumer that a stop frees."""

from __future__ import annotations

import threading
import time

import pytest

from gossip_tts.data import StopRequested
from gossip_tts.data.prefetch import Prefetcher


def wait_until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def counting_producer(sizes: list[int], made: list[int]):
    def make(stop: threading.Event):
        for i, size in enumerate(sizes):
            made.append(i)
            yield b"x" * size
    return make


def test_the_queue_holds_no_more_bytes_than_its_budget():
    made: list[int] = []
    pf = Prefetcher(counting_producer([10] * 100, made), maxsize=1000, max_bytes=35, size_of=len)
    try:
        wait_until(lambda: len(made) >= 4)
        time.sleep(0.2)  # the producer is now blocked on the 4th item
        assert len(made) == 4 and pf.queued_bytes == 30
        assert len(next(pf)) == 10
        wait_until(lambda: len(made) >= 5)
        assert pf.queued_bytes <= 35
        assert sum(1 for _ in pf) == 99
    finally:
        pf.close()


def test_control_counted_in_items_only_the_same_queue_takes_everything():
    made: list[int] = []
    pf = Prefetcher(counting_producer([10] * 100, made), maxsize=1000)
    try:
        wait_until(lambda: len(made) == 100)
    finally:
        pf.close()


def test_an_item_over_the_budget_still_passes_alone():
    made: list[int] = []
    pf = Prefetcher(counting_producer([100, 5, 100], made), maxsize=10, max_bytes=50, size_of=len)
    try:
        assert [len(x) for x in pf] == [100, 5, 100]
    finally:
        pf.close()


def test_a_consumer_waiting_on_a_stuck_producer_leaves_when_interrupted():
    release = threading.Event()

    def stuck(stop: threading.Event):
        release.wait(30)  # like a read blocked on a silent server
        yield b"late"

    interrupt = threading.Event()
    pf = Prefetcher(stuck, maxsize=4, interrupt=interrupt, join_timeout_s=0.2)
    threading.Timer(0.3, interrupt.set).start()
    t0 = time.monotonic()
    with pytest.raises(StopRequested):
        next(pf)
    assert time.monotonic() - t0 < 1.5
    assert isinstance(StopRequested(), KeyboardInterrupt)  # the training loop leaves as on Ctrl+C
    pf.close()
    release.set()
    wait_until(lambda: not pf.alive)
