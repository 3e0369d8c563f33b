"""Counters and gauges of one peer, rendered in the Prometheus text format for GET /metrics."""

from __future__ import annotations

import threading
from collections import defaultdict


class Metrics:
    """Thread-safe: the training thread and the network loop both write here."""

    def __init__(self, prefix: str = "gossip_tts") -> None:
        self.prefix = prefix
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
        self._gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._help: dict[str, tuple[str, str]] = {}
        self._hist: dict[str, list[float]] = defaultdict(list)

    def inc(self, name: str, value: float = 1.0, help: str = "", **labels: str) -> None:
        with self._lock:
            self._help.setdefault(name, ("counter", help))
            self._counters[(name, tuple(sorted(labels.items())))] += value

    def set(self, name: str, value: float, help: str = "", **labels: str) -> None:
        with self._lock:
            self._help.setdefault(name, ("gauge", help))
            self._gauges[(name, tuple(sorted(labels.items())))] = float(value)

    def observe(self, name: str, value: float, keep: int = 4096) -> None:
        """Keep recent values (e.g. staleness of mixed updates) for histograms and summaries."""
        with self._lock:
            values = self._hist[name]
            values.append(float(value))
            if len(values) > keep:
                del values[: len(values) - keep]

    def recent(self, name: str) -> list[float]:
        with self._lock:
            return list(self._hist.get(name, []))

    def get(self, name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            if key in self._counters:
                return self._counters[key]
            return self._gauges.get(key, 0.0)

    def total(self, name: str) -> float:
        """Sum of a counter over all its label values."""
        with self._lock:
            return sum(v for (n, _), v in self._counters.items() if n == name)

    def render(self) -> str:
        with self._lock:
            lines: list[str] = []
            series = sorted({**self._counters, **self._gauges}.items())
            seen: set[str] = set()
            for (name, labels), value in series:
                full = f"{self.prefix}_{name}"
                if name not in seen:
                    kind, text = self._help.get(name, ("gauge", ""))
                    if text:
                        lines.append(f"# HELP {full} {text}")
                    lines.append(f"# TYPE {full} {kind}")
                    seen.add(name)
                label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                lines.append(f"{full}{{{label_text}}} {value:g}" if label_text else f"{full} {value:g}")
            for name, values in sorted(self._hist.items()):
                full = f"{self.prefix}_{name}"
                lines.append(f"# TYPE {full} summary")
                if values:
                    ordered = sorted(values)
                    for q in (0.5, 0.9, 0.99):
                        lines.append(f'{full}{{quantile="{q}"}} {ordered[min(len(ordered) - 1, int(q * len(ordered)))]:g}')
                lines.append(f"{full}_count {len(values)}")
                lines.append(f"{full}_sum {sum(values):g}")
            return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
