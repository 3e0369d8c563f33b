"""Counters, gauges and histograms of one peer, exposed for Prometheus at GET /metrics.

Built on prometheus_client so the exposition is what Prometheus expects: counters keep every
digit (no `%g` rounding), histograms count every observation (not a recent window), the
Content-Type carries the format version (`CONTENT_TYPE`), and `build_info` and the
standard process metrics come along. Each `Metrics` has its own registry: simnet runs
hundreds of peers in one process and their series must not mix.

Metric names are created on first use (callers pass a name and labels), so code that reports
a new figure needs no registration step; its help text is the catalogue's (`peer.metric_help`),
the one place a metric is described.
"""

from __future__ import annotations

import logging
import platform
import sys
import threading
from collections import defaultdict, deque
from typing import Any, Iterator

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from peer.metric_help import help_for

log = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""`text/plain; version=0.0.4; charset=utf-8`: the text format `render()` writes."""

SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""For `*_seconds` histograms: a millisecond step up to a five-minute snapshot transfer."""
COUNT_BUCKETS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0)
"""For other histograms (staleness in steps, sizes in items): powers of two."""

# `<name>_created` timestamps double the exposition and no dashboard of ours reads them.
prometheus_client.disable_created_metrics()

LabelKey = tuple[str, tuple[str, ...]]  # (name, label values in the metric's label order)


class Metrics:
    """Thread-safe: the training thread and the network loop both write here."""

    def __init__(self, prefix: str = "gossip_tts", *, process: bool = True, recent_keep: int = 4096) -> None:
        self.prefix = prefix
        self.registry = CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._metrics: dict[str, Any] = {}
        self._labelnames: dict[str, tuple[str, ...]] = {}
        self._values: dict[LabelKey, float] = {}
        self._histograms: set[LabelKey] = set()
        self._kinds: dict[str, str] = {}
        self._recent: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=recent_keep))
        self._warned: set[str] = set()
        Info(f"{prefix}_build", "version of gossip-tts and of what it runs on", registry=self.registry).info(_build_labels())
        if process:
            prometheus_client.ProcessCollector(registry=self.registry)
            prometheus_client.PlatformCollector(registry=self.registry)
            prometheus_client.GCCollector(registry=self.registry)

    # ------------------------------------------------------------------ writing
    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        """Add to a counter (value >= 0)."""
        with self._lock:
            child = self._child("counter", name, labels)
            if child is not None:
                child.inc(value)
                key = self._key(name, labels)
                self._values[key] = self._values.get(key, 0.0) + float(value)

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set a gauge."""
        with self._lock:
            child = self._child("gauge", name, labels)
            if child is not None:
                child.set(value)
                self._values[self._key(name, labels)] = float(value)

    def observe(self, name: str, value: float, **labels: str) -> None:
        """Add an observation to a histogram (`*_seconds` names get time buckets)."""
        with self._lock:
            child = self._child("histogram", name, labels)
            if child is not None:
                child.observe(value)
                self._histograms.add(self._key(name, labels))
                self._recent[name].append(float(value))

    def forget(self, **labels: str) -> int:
        """Drop every series carrying these label values (e.g. `peer=` of an evicted neighbour).

        Returns how many series went; without it a long-running peer keeps a series for every
        neighbour it ever had."""
        if not labels:
            raise ValueError("forget() needs at least one label, e.g. forget(peer=...)")
        removed = 0
        with self._lock:
            for key in [k for k in [*self._values, *self._histograms] if k[1] and self._matches(k, labels)]:
                name, values = key
                self._metrics[name].remove(*values)
                self._values.pop(key, None)
                self._histograms.discard(key)
                removed += 1
        return removed

    def forget_all_but(self, label: str, keep: set[str]) -> int:
        """Drop every series whose `label` (e.g. `peer`) has a value not in `keep`.

        For the neighbours the node dropped on its own (it holds a bounded number and lets the
        least recently heard go): 300 one-shot keys must not leave 300 series behind."""
        with self._lock:
            gone = {key[1][self._labelnames[key[0]].index(label)] for key in [*self._values, *self._histograms]
                    if label in self._labelnames[key[0]]} - set(keep)
        return sum(self.forget(**{label: value}) for value in gone)

    # ------------------------------------------------------------------ reading
    def get(self, name: str, **labels: str) -> float:
        """A counter's or gauge's current value (0 when never written)."""
        with self._lock:
            names = self._labelnames.get(name)
            if names is None or set(names) != set(labels):
                return 0.0
            return self._values.get((name, tuple(str(labels[n]) for n in names)), 0.0)

    def total(self, name: str) -> float:
        """Sum of a counter over all its label values."""
        with self._lock:
            return sum(v for (n, _), v in self._values.items() if n == name)

    def recent(self, name: str) -> list[float]:
        """The latest observations of a histogram (a bounded window, for summaries like simnet's)."""
        with self._lock:
            return list(self._recent.get(name, ()))

    def series(self) -> Iterator[tuple[str, dict[str, str], float]]:
        """(name, labels, value) of every counter and gauge series, for tests and reports."""
        with self._lock:
            items = [(n, dict(zip(self._labelnames[n], vals)), v) for (n, vals), v in self._values.items()]
        yield from items

    def render(self) -> str:
        """The Prometheus text exposition (serve it with `CONTENT_TYPE`)."""
        return generate_latest(self.registry).decode("utf-8")

    # ------------------------------------------------------------------ internals
    def _child(self, kind: str, name: str, labels: dict[str, str]) -> Any:
        """The labelled child of metric `name`, creating the metric on first use (lock held)."""
        metric = self._metrics.get(name)
        names = tuple(sorted(labels))
        if metric is None:
            metric = self._create(kind, name, names)
        elif self._kinds[name] != kind or self._labelnames[name] != names:
            if name not in self._warned:  # a programming slip must not take the peer down
                self._warned.add(name)
                log.warning("metric %s is a %s with labels %s; ignoring a %s write with labels %s",
                            name, self._kinds[name], self._labelnames[name], kind, names)
            return None
        return metric.labels(**labels) if names else metric

    def _create(self, kind: str, name: str, names: tuple[str, ...]) -> Any:
        full = f"{self.prefix}_{name}"
        help = help_for(name)
        if kind == "counter":
            metric = Counter(full, help, names, registry=self.registry)
        elif kind == "gauge":
            metric = Gauge(full, help, names, registry=self.registry)
        else:
            buckets = SECONDS_BUCKETS if name.endswith("_seconds") else COUNT_BUCKETS
            metric = Histogram(full, help, names, registry=self.registry, buckets=buckets)
        self._metrics[name], self._kinds[name], self._labelnames[name] = metric, kind, names
        return metric

    def _key(self, name: str, labels: dict[str, str]) -> LabelKey:
        return name, tuple(str(labels[n]) for n in self._labelnames[name])

    def _matches(self, key: LabelKey, labels: dict[str, str]) -> bool:
        have = dict(zip(self._labelnames[key[0]], key[1]))
        return all(have.get(k) == str(v) for k, v in labels.items())


def _build_labels() -> dict[str, str]:
    """Versions for `<prefix>_build_info`; torch only if already imported (never imported here)."""
    torch = sys.modules.get("torch")
    return {"version": _version("gossip-tts"), "python": platform.python_version(),
            "torch": str(getattr(torch, "__version__", "not loaded")), "prometheus_client": _version("prometheus_client")}


def _version(distribution: str) -> str:
    try:
        from importlib.metadata import version

        return version(distribution)
    except Exception:  # not installed (e.g. run from a source tree)
        return "unknown"
