"""The outbox: recent signed update frames, bounded in bytes, never fewer than a few.

A neighbour that missed some updates is sent the ones it lacks from here; when the gap
reaches past the oldest kept frame it gets an exact snapshot instead. A byte bound alone
holds no frame at all once one update outgrows it (an update of the echo-2.4b preset is
hundreds of MB), and then every partner a single publish behind would need the whole
model, so the newest `min_frames` are kept whatever their size.
"""

from __future__ import annotations

from collections import deque


class Outbox:
    def __init__(self, max_bytes: int, min_frames: int = 0) -> None:
        self.max_bytes, self.min_frames = max_bytes, min_frames
        self._frames: deque[tuple[int, bytes]] = deque()
        self._bytes = 0

    def append(self, seq: int, frame: bytes) -> None:
        if self._frames and seq != self._frames[-1][0] + 1:
            raise ValueError(f"outbox seq {seq} does not follow {self._frames[-1][0]}")
        self._frames.append((seq, frame))
        self._bytes += len(frame)
        while len(self._frames) > self.min_frames and self._bytes > self.max_bytes:
            _, old = self._frames.popleft()
            self._bytes -= len(old)

    def clear(self) -> None:
        self._frames.clear()
        self._bytes = 0

    def since(self, seq: int) -> list[bytes] | None:
        """Frames with seq > `seq`, or None when some of them were already dropped."""
        if not self._frames:
            return None
        first = self._frames[0][0]
        if seq + 1 < first:
            return None
        return [frame for s, frame in self._frames if s > seq]

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._frames)
