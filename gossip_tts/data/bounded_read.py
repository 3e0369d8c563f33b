"""A shard's bytes under a deadline and a stall timeout, which another thread can cut short.

A socket timeout bounds each wait for bytes, but a server that sends one byte every few
seconds never trips it and holds a reader for as long as it likes; and a thread blocked in
`recv` does not notice that the run is stopping. `BoundedReader` wraps a local file or an
http response: a `Watchdog` shuts the socket down when the read's deadline passes, and
`abort()` does the same at once from any thread (LatentStream.close). Either turns into a
SourceTimeout or SourceAborted naming the shard, never a hang.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from typing import BinaryIO

from gossip_tts.data.errors import SourceAborted, SourceError, SourceTimeout

_SKIP_CHUNK = 1 << 16


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
    waits for its consumer (a full prefetch queue), which no server can stretch.
    """

    def __init__(self, what: str, deadline_s: float, stall_s: float, reads: OpenReads | None = None) -> None:
        self.what, self.deadline_s, self.stall_s = what, deadline_s, stall_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._spent = 0.0
        self._since: float | None = time.monotonic()  # None while paused
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.cut: SourceError | None = None
        """Why the read was cut short (SourceTimeout, SourceAborted), once it was."""
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

    def _run(self) -> None:
        with self._lock:
            while not self._closed and self.cut is None:
                left = self.deadline_s - self._elapsed()
                if self._since is not None and left <= 0:
                    break
                self._wake.wait(left if self._since is not None else None)
            else:
                return
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
        self._cut(SourceTimeout(f"{self.what}: not read within {self.deadline_s:g} s (shard_deadline_s); abandoned"))

    def abort(self) -> None:
        """Stop the read now, from any thread."""
        self._cut(SourceAborted(f"{self.what}: reading stopped because the stream was closed"))

    def _cut(self, why: SourceError) -> None:
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
        """Raise the cut, or a SourceTimeout once the deadline has passed (local files have no thread)."""
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


class BoundedReader:
    """Sequential reads of a file or an http body, each checked against the watchdog.

    `read(n)` returns at most n bytes (fewer only at the end of the stream); `skip(n)` moves
    past n bytes without keeping them (a seek on local files).
    """

    def __init__(self, raw: BinaryIO, watchdog: Watchdog) -> None:
        self._raw = raw
        self.watchdog = watchdog
        self._size: int | None = None
        if not isinstance(raw, http.client.HTTPResponse):
            try:
                self._size = os.fstat(raw.fileno()).st_size if raw.seekable() else None
            except (OSError, ValueError, AttributeError):
                self._size = None

    def __enter__(self) -> "BoundedReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def abort(self) -> None:
        self.watchdog.abort()

    def read(self, n: int) -> bytes:
        wd = self.watchdog
        wd.check()
        try:
            data = self._raw.read(n)
        except (socket.timeout, TimeoutError) as e:
            wd.check()
            raise SourceTimeout(f"{wd.what}: no data for {wd.stall_s:g} s (stall_timeout_s)") from e
        except (OSError, ValueError, http.client.HTTPException) as e:
            wd.check()  # the cut caused it: say so rather than the socket's complaint
            raise SourceError(f"{wd.what}: read failed: {type(e).__name__}: {e}") from e
        wd.check()
        return data

    def skip(self, n: int) -> int:
        """Move past up to n bytes; returns how many there were (fewer only at the end)."""
        if self._size is not None:
            self.watchdog.check()
            here = self._raw.tell()
            moved = max(0, min(n, self._size - here))
            self._raw.seek(here + moved)
            return moved
        moved = 0
        while moved < n:
            data = self.read(min(_SKIP_CHUNK, n - moved))
            if not data:
                break
            moved += len(data)
        return moved

    def close(self) -> None:
        self.watchdog.close()
        try:
            self._raw.close()
        except (OSError, ValueError, http.client.HTTPException):
            pass
