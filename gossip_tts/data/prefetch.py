"""Run a producer in a background thread and hand its items over through a bounded queue.

Reading tars (disk or network) and decoding npy overlaps with the training step this
way. The thread is owned: `close()` stops and joins it, and a producer exception is
re-raised in the consumer instead of dying silently in the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

_POLL_S = 0.05


class _End:
    pass


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Prefetcher(Generic[T]):
    """Iterates `make(stop)` in a daemon thread, keeping up to `maxsize` items ready.

    `make` receives the stop event so that a long producer loop can notice a close
    between items; the producer's generator is closed in its own thread either way.
    """

    def __init__(
        self,
        make: Callable[[threading.Event], Iterator[T]],
        maxsize: int,
        name: str = "prefetch",
        join_timeout_s: float = 10.0,
    ) -> None:
        if maxsize <= 0:
            raise ValueError(f"prefetch queue size must be positive, got {maxsize}")
        self._make = make
        self._queue: queue.Queue[object] = queue.Queue(maxsize=maxsize)
        self._stop = threading.Event()
        self._done = False
        self._join_timeout_s = join_timeout_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        it: Iterator[T] | None = None
        try:
            it = self._make(self._stop)
            for item in it:
                if not self._put(item):
                    return
            self._put(_End())
        except BaseException as e:  # handed to the consumer, which decides what is fatal
            self._put(_Failure(e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # a producer that fails while closing must not kill the join
                    log.exception("prefetch producer failed while closing")

    def __iter__(self) -> "Prefetcher[T]":
        return self

    def __next__(self) -> T:
        while not self._done:
            try:
                item = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self._done = True
                continue
            if isinstance(item, _End):
                self._done = True
            elif isinstance(item, _Failure):
                self._done = True
                raise item.exc
            else:
                return item  # type: ignore[return-value]
        raise StopIteration

    def close(self) -> None:
        """Stop the producer and wait for its thread; safe to call twice."""
        self._stop.set()
        self._done = True
        while True:  # free a producer blocked on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(self._join_timeout_s)
            if self._thread.is_alive():
                log.warning("prefetch thread %s still busy %.0f s after close", self._thread.name, self._join_timeout_s)
