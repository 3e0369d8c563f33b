"""Replay protection: a per-sender sliding window over sequence numbers.

The same scheme as IPsec's anti-replay window (RFC 4303 §3.4.3): remember the highest
`seq` seen and a bitmap of the `window` below it; anything older than the window is
refused. Senders are kept in LRU order up to `max_senders`; an evicted sender's old
frames could be replayed again, which the receiver's timestamp-skew check still bounds.
Not thread-safe: one window belongs to one event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["ReplayWindow"]


class ReplayWindow:
    """`check(sender, seq)` says whether `seq` is fresh; `record` marks it seen.

    `channel` separates independent sequence spaces of one sender (decode_frame uses the
    frame kind, so an update and a snapshot may carry the same `seq`).
    """

    def __init__(self, window: int = 1024, max_senders: int = 4096) -> None:
        if window <= 0 or max_senders <= 0:
            raise ValueError("window and max_senders must be positive")
        self.window = int(window)
        self.max_senders = int(max_senders)
        self._mask = (1 << self.window) - 1
        # key -> [highest seq, bitmap]; bit i set <=> seq (highest - i) was seen
        self._state: OrderedDict[Hashable, list[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._state)

    def check(self, sender: bytes, seq: int, channel: str = "") -> bool:
        """True if `seq` from `sender` has not been recorded and is not too old."""
        if seq < 0:
            return False
        state = self._state.get((bytes(sender), channel))
        if state is None:
            return True
        highest, bitmap = state
        if seq > highest:
            return True
        age = highest - seq
        return age < self.window and not (bitmap >> age) & 1

    def record(self, sender: bytes, seq: int, channel: str = "") -> None:
        """Mark `seq` seen; call only once the whole frame has verified."""
        if seq < 0:
            raise ValueError("seq must be >= 0")
        key = (bytes(sender), channel)
        state = self._state.get(key)
        if state is None:
            self._state[key] = [seq, 1]
            while len(self._state) > self.max_senders:
                self._state.popitem(last=False)
            return
        self._state.move_to_end(key)
        highest, bitmap = state
        if seq > highest:
            shift = seq - highest
            state[0] = seq
            state[1] = ((bitmap << shift) | 1) & self._mask if shift < self.window else 1
        elif highest - seq < self.window:
            state[1] = bitmap | (1 << (highest - seq))
