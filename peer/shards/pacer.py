"""`UploadPacer`: all shard uploads of a peer together send at most `rate` bytes a second.

A peer that serves shards is first a trainer: on a machine whose cores all train, an upload
as fast as the network allows takes CPU (and memory bandwidth) from the training step.
Each upload asks the pacer before sending a piece; the pacer answers how long to wait. A
token bucket: up to `burst` bytes go at once, then the average is `rate`; a piece taken
beyond the bucket is a debt the next asker waits for too, so many uploads share the rate.
Pure: the caller passes the time and does the waiting.
"""

from __future__ import annotations


class UploadPacer:
    def __init__(self, rate: float, burst: float, now: float) -> None:
        if not (rate > 0 and burst > 0):
            raise ValueError(f"an upload pacer needs rate > 0 and burst > 0, got {rate} and {burst}")
        self.rate, self.burst = rate, burst
        self._tokens, self._at = burst, now

    def delay(self, n: int, now: float) -> float:
        """Take `n` bytes from the bucket; the seconds to wait before sending them (0 within the rate)."""
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._at) * self.rate) - n
        self._at = max(self._at, now)
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
