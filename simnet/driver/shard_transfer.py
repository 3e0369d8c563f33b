"""One shard download over simulated links: `GET /v1/shards/HASH` with a Range, as a segment stream.

The server sends the bytes from `offset` on in segments; at most `window` are in flight, and
the next leaves when the receipt of the oldest is back at the server (one latency after it
arrived), as a TCP window would. Several transfers from one peer therefore interleave on its
uplink and share it, and a gossip message waits behind at most the segments already queued.
A transfer cut off (the client gave up on it) stops sending; what arrived stays in the
client's part file and the next source resumes from there.
"""

from __future__ import annotations

from typing import Callable

from simnet.world.links import SimLinks
from simnet.world.scheduler import Scheduler


class SegmentStream:
    """Bytes [offset, size) of one shard from peer `src` to peer `dst`."""

    def __init__(self, links: SimLinks, sched: Scheduler, src: int, dst: int, offset: int, size: int, segment: int,
                 window: int, on_bytes: Callable[[int], None], on_done: Callable[[], None],
                 on_sent: Callable[[int], None]) -> None:
        self.links, self.sched, self.src, self.dst = links, sched, src, dst
        self.next_offset, self.size, self.segment, self.window = offset, size, segment, window
        self.on_bytes, self.on_done, self.on_sent = on_bytes, on_done, on_sent
        self.in_flight = 0
        self.cancelled = False
        self.finished = False

    def begin(self) -> None:
        for _ in range(self.window):
            self._send_next()
        if self.next_offset >= self.size and self.in_flight == 0:  # nothing left to send (resumed at the end)
            self._finish()

    def cancel(self) -> None:
        """The client stopped reading (stall, deadline): nothing more is sent."""
        self.cancelled = True

    def _send_next(self) -> None:
        if self.cancelled or self.next_offset >= self.size:
            return
        n = min(self.segment, self.size - self.next_offset)
        self.next_offset += n
        self.in_flight += 1
        self.on_sent(n)
        self.links.send(self.src, self.dst, n, lambda: self._arrived(n))

    def _arrived(self, n: int) -> None:
        self.in_flight -= 1
        if self.cancelled:
            return
        self.on_bytes(n)
        if self.next_offset >= self.size and self.in_flight == 0:
            self._finish()
            return
        self.sched.after(self.links.latency(self.dst, self.src), self._send_next)  # the receipt travels back

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.on_done()
