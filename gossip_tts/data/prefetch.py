"""Run a producer in a background thread and hand its items over through a bounded queue.

Reading tars (disk or network) and decoding npy overlaps with the training step this
way. The queue is bounded in items and, when the caller says how big an item is, in bytes:
a stream of large samples holds no more memory than a stream of small ones. The thread is
owned: `close()` stops and joins it, and a producer exception is re-raised in the consumer
instead of dying silently in the thread. A consumer waiting for an item gives up with
StopRequested as soon as its `interrupt` event is set, so a stalled source never holds up
a run that was asked to stop.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Callable, Generic, Iterator, TypeVar

from gossip_tts.data.errors import StopRequested

T = TypeVar("T")
log = logging.getLogger(__name__)

_POLL_S = 0.05


class _End:
    pass


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Prefetcher(Generic[T]):
    """Iterates `make(stop)` in a daemon thread, keeping up to `maxsize` items (and at most
    `max_bytes` of them by `size_of`, always at least one) ready.

    `make` receives the stop event so that a long producer loop can notice a close
    between items; the producer's generator is closed in its own thread either way.
    """

    def __init__(
        self,
        make: Callable[[threading.Event], Iterator[T]],
        maxsize: int,
        name: str = "prefetch",
        join_timeout_s: float = 5.0,
        *,
        max_bytes: int | None = None,
        size_of: Callable[[T], int] | None = None,
        interrupt: threading.Event | None = None,
    ) -> None:
        if maxsize <= 0:
            raise ValueError(f"prefetch queue size must be positive, got {maxsize}")
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"prefetch byte budget must be positive, got {max_bytes}")
        self._make = make
        self._maxsize, self._max_bytes = maxsize, max_bytes
        self._size_of = size_of if size_of is not None and max_bytes is not None else None
        self._items: deque[tuple[object, int]] = deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._interrupt = interrupt
        self._done = False
        self._join_timeout_s = join_timeout_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queued_bytes(self) -> int:
        with self._cond:
            return self._bytes

    def _full(self, size: int) -> bool:
        if not self._items:
            return False
        return len(self._items) >= self._maxsize or (self._max_bytes is not None and self._bytes + size > self._max_bytes)

    def _put(self, item: object, size: int = 0) -> bool:
        with self._cond:
            while self._full(size):
                if self._stop.is_set():
                    return False
                self._cond.wait(_POLL_S)
            if self._stop.is_set():
                return False
            self._items.append((item, size))
            self._bytes += size
            self._cond.notify_all()
        return True

    def _run(self) -> None:
        it: Iterator[T] | None = None
        try:
            it = self._make(self._stop)
            for item in it:
                if not self._put(item, self._size_of(item) if self._size_of is not None else 0):
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

    def _take(self) -> object | None:
        """The next queued item, or None after waiting one poll interval."""
        with self._cond:
            if not self._items:
                self._cond.wait(_POLL_S)
            if not self._items:
                return None
            item, size = self._items.popleft()
            self._bytes -= size
            self._cond.notify_all()
            return item

    def __next__(self) -> T:
        while not self._done:
            if self._interrupt is not None and self._interrupt.is_set():
                raise StopRequested("stopped while waiting for training data")
            item = self._take()
            if item is None:
                if not self._thread.is_alive() and not self._items:
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
        """Stop the producer and wait (at most `join_timeout_s`) for its thread; safe to call twice."""
        self._stop.set()
        self._done = True
        with self._cond:  # free a producer blocked on a full queue
            self._items.clear()
            self._bytes = 0
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(self._join_timeout_s)
            if self._thread.is_alive():
                log.warning("prefetch thread %s still busy %.0f s after close", self._thread.name, self._join_timeout_s)
