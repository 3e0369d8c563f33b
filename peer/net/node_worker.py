"""The one thread that owns a real peer's `GossipNode`, and the hand-over from training.

Thread model (docs/architecture.md):
- the training thread trains, mixes from `node.view_slot` at step boundaries, and puts a
  parameter copy into `PendingPublish`; it never calls the node and never waits for it;
- the event-loop thread runs the session and the HTTP client/server, and sends every
  piece of node work (compress, sign, verify, decode, apply) here with `await call(...)`;
- this worker thread runs that work one item at a time, so the node, its replay window and
  its outbox have exactly one user and need no lock.

The CPU time of each job is counted in `worker_cpu_seconds_total{task=...}` (the task is the
function's name: publish_pending, build_request, handle_request, handle_response, ...), so
a running peer shows what gossip costs it without a profiler. The jobs of gossip (all but the
status page's summaries) also add up in `protocol_cpu_s`, which the publish budget reads.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from peer.boundary import PendingPublish
from peer.core.neighbour import ExchangeResult
from peer.core.node import GossipNode

T = TypeVar("T")


class _Now:
    """The type of `NOW`."""

    def __repr__(self) -> str:
        return "NOW"


NOW = _Now()
"""An argument to `NodeWorker.call` that the worker replaces with its clock's reading when the
job runs (a frame is stamped when it is built, not when it was queued); passing the node's
own method rather than a lambda also names the job in `worker_cpu_seconds_total`."""


class WorkerBusy(RuntimeError):
    """Too many requests of others already wait for the node worker."""


class NodeWorker:
    """Runs every call on the node on one dedicated thread."""

    def __init__(self, node: GossipNode, clock: Callable[[], float]) -> None:
        self.node = node
        self.clock = clock
        """Wall clock for frame timestamps, read on the worker when the work runs."""
        self.pending = PendingPublish()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gossip-node")
        self.queued_for_others = 0
        """Jobs of `call_for_others` queued or running."""
        self._protocol_lock = threading.Lock()
        self._protocol_cpu_s = 0.0

    async def call(self, fn: Callable[..., T], *args: Any, protocol: bool = True) -> T:
        """Run `fn(*args)` on the worker thread (`NOW` among `args`: the clock then); `fn` may touch
        the node. `protocol=False`: work that is not gossip (the status page's), which the
        publish budget does not count."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._timed, fn, args, protocol)

    def protocol_cpu_s(self) -> float:
        """Any thread: the worker's CPU seconds on gossip jobs so far."""
        with self._protocol_lock:
            return self._protocol_cpu_s

    def _timed(self, fn: Callable[..., T], args: tuple, protocol: bool) -> T:
        start = time.thread_time()
        try:
            return fn(*(self.clock() if a is NOW else a for a in args))
        finally:
            spent = time.thread_time() - start
            self.node.metrics.inc("worker_cpu_seconds_total", spent, task=getattr(fn, "__name__", "other"))
            if protocol:
                with self._protocol_lock:
                    self._protocol_cpu_s += spent

    async def call_for_others(self, limit: int, fn: Callable[..., T], *args: Any) -> T:
        """`call`, for work another peer asks of us: WorkerBusy when `limit` such jobs already wait.

        Our own work (publish, our exchanges, the status summary) is bounded by the session and
        always queued; the work of others is bounded here, however many addresses send it."""
        if self.queued_for_others >= limit:
            raise WorkerBusy(f"{self.queued_for_others} requests already wait for the node worker")
        self.queued_for_others += 1
        try:
            return await self.call(fn, *args)
        finally:
            self.queued_for_others -= 1

    def handle_request(self, body: bytes, now: float, address: str,
                       verified: frozenset[bytes]) -> tuple[bytes, ExchangeResult]:
        """On the worker: `GossipNode.handle_request` of a request from `address` (`verified`: the
        session's verified keys, read on the loop that owns them)."""
        return self.node.handle_request(body, now, address=address, verified=verified)

    def publish_pending(self) -> tuple[int, str | None] | None:
        """On the worker: publish the newest handed-over copy; (step, error) or None if none."""
        item = self.pending.take()
        if item is None:
            return None
        x, step, outside = item
        try:
            self.node.publish(x, step, self.clock(), outside)
        except ValueError as exc:  # non-finite parameters: nothing sane to publish
            return step, str(exc)
        finally:
            self.pending.finished()
        return step, None

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
