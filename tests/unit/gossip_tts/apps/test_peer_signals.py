"""A peer run takes SIGTERM as a graceful stop while it runs, and gives the handler back after."""

from __future__ import annotations

import signal
import threading

from gossip_tts.apps.peer_app import sigterm_stops


def test_sigterm_stops_the_run_and_the_handler_before_it_is_back_after():
    def before(signum, frame) -> None:
        raise AssertionError("the run's handler should have taken this SIGTERM")

    previous = signal.signal(signal.SIGTERM, before)
    lines: list[str] = []
    stop = threading.Event()
    try:
        with sigterm_stops(stop, lines.append):
            signal.raise_signal(signal.SIGTERM)
        assert stop.is_set() and lines == ["SIGTERM: stopping after this step"]
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_handler_is_back_when_the_run_fails():
    stop = threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    try:
        with sigterm_stops(stop, print):
            raise ValueError("the data did not load")
    except ValueError:
        pass
    assert signal.getsignal(signal.SIGTERM) is before
