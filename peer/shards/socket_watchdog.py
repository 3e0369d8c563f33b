"""A deadline and an abort switch for one read from a socket, which another thread can pull.

A socket timeout bounds each wait for bytes, but a server that sends one byte every few
seconds never trips it and holds a reader for as long as it likes, headers included; and a
thread blocked in `recv` does not notice that its owner is stopping. A `Watchdog` shuts the
socket down when the read's deadline passes, or at once on `abort()` from any thread; the
blocked reader wakes and `check()` says why. `OpenReads` cuts every read of one owner at once.

Used by the shard downloader (peer/shards/download.py) and, through a subclass raising its own
errors, by the training data's reader (gossip_tts/data/bounded_read.py).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable


STOP_POLL_S = 0.1
"""How often a watchdog given a `stop` flag looks at it (a set flag cuts the read)."""


class ReadDeadline(TimeoutError):
    """The read went past its deadline (the watchdog shut its socket down)."""


class ReadAborted(ConnectionAbortedError):
    """The read was cut short from another thread (its owner is stopping)."""


class OpenReads:
    """The reads a stream has open, so that closing the stream cuts every one of them at once.

    After `abort_all()` a read that opens is cut as it registers: a producer thread between
    two shards cannot start a fresh wait after the stream was closed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Watchdog] = set()
        self._closed = False

    def add(self, watchdog: "Watchdog") -> None:
        with self._lock:
            self._open.add(watchdog)
            closed = self._closed
        if closed:
            watchdog.abort()

    def discard(self, watchdog: "Watchdog") -> None:
        with self._lock:
            self._open.discard(watchdog)

    def abort_all(self) -> None:
        with self._lock:
            self._closed = True
            open_now = list(self._open)
        for watchdog in open_now:
            watchdog.abort()


class Watchdog:
    """The deadline and the abort switch of one read; shuts its socket down when either comes.

    Shutting a socket down wakes a thread blocked in `recv` on it at once (it reads EOF), so
    the reading thread ends within moments of the cut, however slowly the server trickles.
    The deadline counts time spent reading only: `paused()` stops the clock while the reader
    waits for its consumer (a full prefetch queue), which no server can stretch. With `stop`
    (an owner's event that nothing else could wake us for), its set cuts the read as `abort()`
    does, within STOP_POLL_S.

    What a cut raises is the class's to say (`timeout_error`, `abort_error`): the training
    data's watchdog raises its own source errors; the shard downloader maps these.
    """

    timeout_error: Callable[[str], Exception] = ReadDeadline
    abort_error: Callable[[str], Exception] = ReadAborted
    deadline_name = ""
    """The setting the deadline came from, named in the timeout's message (e.g. " (shard_deadline_s)")."""

    def __init__(self, what: str, deadline_s: float, stall_s: float, reads: OpenReads | None = None,
                 stop: threading.Event | None = None) -> None:
        self.what, self.deadline_s, self.stall_s, self._stop = what, deadline_s, stall_s, stop
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._spent = 0.0
        self._since: float | None = time.monotonic()  # None while paused
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.cut: Exception | None = None
        """Why the read was cut short (a `timeout_error` or an `abort_error`), once it was."""
        self._reads = reads
        if reads is not None:
            reads.add(self)

    def watch(self, sock: socket.socket) -> None:
        """Guard this socket (a redirect brings a new one); the first one starts the deadline thread."""
        with self._lock:
            self._sock = sock
            cut = self.cut
            if cut is None and self._thread is None:
                self._thread = threading.Thread(target=self._run, name="shard-deadline", daemon=True)
                self._thread.start()
        if cut is not None:
            self._shutdown(sock)

    def _elapsed(self) -> float:  # under the lock
        return self._spent + (time.monotonic() - self._since if self._since is not None else 0.0)

    def elapsed(self) -> float:
        """Seconds spent reading so far (paused time left out)."""
        with self._lock:
            return self._elapsed()

    def _stopped(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    def _run(self) -> None:
        with self._lock:
            while not self._closed and self.cut is None:
                if self._stopped():
                    break
                left = self.deadline_s - self._elapsed()
                if self._since is not None and left <= 0:
                    break
                wait = left if self._since is not None else None
                if self._stop is not None:
                    wait = STOP_POLL_S if wait is None else min(wait, STOP_POLL_S)
                self._wake.wait(wait)
            else:
                return
        if self._stopped():
            self.abort()
        else:
            self._expire()

    def pause(self) -> None:
        with self._lock:
            if self._since is not None:
                self._spent += time.monotonic() - self._since
                self._since = None
                self._wake.notify_all()

    def resume(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                self._wake.notify_all()

    def _expire(self) -> None:
        self._cut(self.timeout_error(f"{self.what}: not read within {self.deadline_s:g} s{self.deadline_name}; abandoned"))

    def abort(self) -> None:
        """Stop the read now, from any thread."""
        self._cut(self.abort_error(f"{self.what}: reading stopped because the stream was closed"))

    def _cut(self, why: Exception) -> None:
        with self._lock:
            if self.cut is None:
                self.cut = why
            sock = self._sock
            self._wake.notify_all()
        if sock is not None:
            self._shutdown(sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed or never connected
            pass

    def check(self) -> None:
        """Raise the cut, or an `abort_error` once `stop` is set, or a `timeout_error` once the deadline
        has passed (local files have no thread)."""
        if self.cut is None and self._stopped():
            self.abort()
        if self.cut is None and self.elapsed() > self.deadline_s:
            self._expire()
        if self.cut is not None:
            raise self.cut

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        if self._reads is not None:
            self._reads.discard(self)
