"""ReplayWindow: exact acceptance at the window's edges and LRU eviction of senders."""

from __future__ import annotations

import pytest

from protocol import ReplayWindow

S1, S2 = b"\x01" * 32, b"\x02" * 32


def test_fresh_seen_and_edges_of_the_window() -> None:
    w = ReplayWindow(window=8)
    assert w.check(S1, 0) and w.check(S1, 10**12)
    w.record(S1, 100)
    assert not w.check(S1, 100)
    assert w.check(S1, 101) and w.check(S1, 99) and w.check(S1, 93)  # age 7: inside
    assert not w.check(S1, 92)  # age 8: outside
    w.record(S1, 95)
    assert not w.check(S1, 95) and w.check(S1, 96)
    w.record(S1, 103)  # shift by 3: 95 now has age 8
    assert not w.check(S1, 95) and not w.check(S1, 100) and w.check(S1, 99) and w.check(S1, 102)
    w.record(S1, 10**6)  # a jump larger than the window clears the bitmap
    assert not w.check(S1, 10**6) and w.check(S1, 10**6 - 1) and not w.check(S1, 10**6 - 8)
    assert not w.check(S1, -1)


def test_channels_and_senders_are_independent() -> None:
    w = ReplayWindow()
    w.record(S1, 5, "update")
    assert not w.check(S1, 5, "update")
    assert w.check(S1, 5, "snapshot") and w.check(S2, 5, "update")


def test_lru_evicts_least_recently_recorded_sender() -> None:
    w = ReplayWindow(window=4, max_senders=2)
    w.record(S1, 1)
    w.record(S2, 1)
    w.record(S1, 2)  # S1 is now most recent
    w.record(b"\x03" * 32, 1)
    assert len(w) == 2
    assert w.check(S2, 1)  # forgotten
    assert not w.check(S1, 1) and not w.check(S1, 2)


@pytest.mark.parametrize("args", [(0, 1), (1, 0), (-1, 5)])
def test_bad_sizes(args) -> None:
    with pytest.raises(ValueError):
        ReplayWindow(*args)


def test_record_negative_seq_is_a_bug() -> None:
    with pytest.raises(ValueError):
        ReplayWindow().record(S1, -1)
