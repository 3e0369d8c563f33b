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
from typing import BinaryIO

from gossip_tts.data.errors import SourceAborted, SourceError, SourceTimeout
from peer.shards.socket_watchdog import OpenReads
from peer.shards.socket_watchdog import Watchdog as SocketWatchdog

__all__ = ["BoundedReader", "OpenReads", "Watchdog"]

_SKIP_CHUNK = 1 << 16


class Watchdog(SocketWatchdog):
    """A shard read's watchdog (peer/shards/socket_watchdog.py): its cuts are SourceTimeout and
    SourceAborted naming the shard, which the stream counts as a failed shard."""

    timeout_error = SourceTimeout
    abort_error = SourceAborted
    deadline_name = " (shard_deadline_s)"


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
