"""The loss curve and step rates behind `GET /v1/status`, fed by the training loop.

The training thread records each step here; the event loop reads a copy when it answers
`/v1/status`. The peer's builder (`peer.startup`) makes one and hands it to both: the training
loop (`run_loop(loss_history=...)`) and the HTTP server's status routes.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import Any

MAX_POINTS = 512
"""Points kept for the loss curve; a page and a terminal both draw 512 points at once."""
RATE_WINDOW_S = 30.0
"""Steps/s and audio-seconds/s are averaged over this many recent seconds."""


class LossHistory:
    """A bounded loss curve of the whole run, and recent step rates. Thread-safe.

    Every point is the mean loss of `stride` consecutive steps. When the curve is full,
    neighbouring points are merged pairwise and `stride` doubles, so the curve always
    spans the whole run in at most `max_points` points (a peer runs for hours; keeping
    only the last 512 steps would show a few seconds of a tiny model).
    """

    def __init__(self, max_points: int = MAX_POINTS, rate_window_s: float = RATE_WINDOW_S) -> None:
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, got {max_points}")
        self.max_points, self.rate_window_s = max_points, rate_window_s
        self._lock = threading.Lock()
        self._points: list[tuple[int, float, float]] = []  # (last step, mean loss, wall time of last step)
        self._stride = 1
        self._bucket: list[float] = []
        self._recent: deque[tuple[float, float]] = deque(maxlen=65536)  # (time, audio seconds) per step
        self._last: tuple[int, float, float] | None = None

    def add(self, step: int, loss: float, t: float, audio_seconds: float = 0.0) -> None:
        """Training thread: one finished step (`t` is wall-clock seconds)."""
        with self._lock:
            self._last = (int(step), float(loss), float(t))
            self._recent.append((float(t), float(audio_seconds)))
            while self._recent and self._recent[0][0] < t - self.rate_window_s:
                self._recent.popleft()
            self._bucket.append(float(loss))
            if len(self._bucket) < self._stride:
                return
            self._points.append((int(step), _mean(self._bucket), float(t)))
            self._bucket = []
            if len(self._points) >= self.max_points:
                odd = self._points[-1:] if len(self._points) % 2 else []
                pairs = zip(self._points[0::2], self._points[1::2])
                self._points = [(b[0], (a[1] + b[1]) / 2, b[2]) for a, b in pairs] + odd
                self._stride *= 2

    def to_json(self) -> dict[str, Any]:
        """The curve for a checkpoint's metadata, so that a resumed run's page shows all of it."""
        with self._lock:
            points = [[p[0], p[1], p[2]] for p in self._points if math.isfinite(p[1])]
            return {"points": points, "stride": self._stride}

    def restore(self, saved: Any) -> bool:
        """Take back a curve `to_json` wrote (resume), before the first new step; False when
        `saved` is absent or malformed (the curve then starts at the resume step, as before)."""
        try:
            stride = int(saved["stride"])
            points = [(int(s), float(v), float(t)) for s, v, t in saved["points"]][-self.max_points + 1:]
        except (KeyError, TypeError, ValueError):
            return False
        ordered = all(a[0] < b[0] for a, b in zip(points, points[1:]))
        if not (1 <= stride <= 1 << 40 and ordered and all(math.isfinite(v) and math.isfinite(t) for _, v, t in points)):
            return False
        with self._lock:
            if self._points or self._bucket:
                return False
            self._points, self._stride = points, stride
        return True

    def points(self) -> list[tuple[int, float, float]]:
        """The curve, oldest first, with the steps of a partly filled point at the end."""
        with self._lock:
            out = list(self._points)
            if self._bucket and self._last is not None:
                out.append((self._last[0], _mean(self._bucket), self._last[2]))
            return out

    def last(self) -> tuple[int, float, float] | None:
        """(step, loss, time) of the newest step, or None before the first."""
        with self._lock:
            return self._last

    def rates(self) -> tuple[float | None, float | None]:
        """(steps/s, audio-seconds/s) over the recent window; None until two steps are known."""
        with self._lock:
            if len(self._recent) < 2:
                return None, None
            dt = self._recent[-1][0] - self._recent[0][0]
            if dt <= 0:
                return None, None
            audio = sum(a for _, a in list(self._recent)[1:])  # what the steps after the first produced
            return (len(self._recent) - 1) / dt, audio / dt


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan

