"""`Ticker`: run one function every so often on a daemon thread until closed.

The shard fetcher's planning round and the signed-manifest watch both run this way; a
failing round is logged and the next one comes anyway (a bug must not end fetching, or
the watch, for the life of the peer).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Ticker:
    def __init__(self, name: str, every_s: float, tick: Callable[[], object], stop: threading.Event | None = None,
                 wait_first: bool = False) -> None:
        self.every_s, self.tick, self.wait_first = every_s, tick, wait_first
        self.stop = stop or threading.Event()
        """Set by `close`; the owner may share it with work the ticks start (downloads check it)."""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        self.stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        if self.wait_first and self.stop.wait(self.every_s):
            return
        while not self.stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("%s failed; trying again in %g s", self._thread.name, self.every_s)
            self.stop.wait(self.every_s)
