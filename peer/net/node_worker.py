"""The one thread that owns a real peer's `GossipNode`, and the hand-over from training.

Thread model (docs/architecture.md):
- the training thread trains, mixes from `node.view_slot` at step boundaries, and puts a
  parameter copy into `PendingPublish`; it never calls the node and never waits for it;
- the event-loop thread runs the session and the HTTP client/server, and sends every
  piece of node work (compress, sign, verify, decode, apply) here as a named job
  (`await worker.build_request(key)`, `worker.handle_response(reply)`, ...);
- this worker thread runs that work one item at a time, so the node, its replay window and
  its outbox have exactly one user and need no lock.

Each job that stamps a frame or checks one against the time reads the worker's clock when it
runs, not when it was queued. The CPU time of each job is counted in
`worker_cpu_seconds_total{task=...}` (the task is the job's name: publish_pending,
build_request, handle_request, handle_response, ...), so
a running peer shows what gossip costs it without a profiler. The jobs of our own gossip (all but the
answers we give others, and the status page's summaries) also add up in `protocol_cpu_s`,
which the publish budget reads.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable, TypeVar

import torch

from peer.boundary import PendingPublish
from peer.core import ExchangeResult, GossipNode

T = TypeVar("T")


class WorkerBusy(RuntimeError):
    """Too many requests of others already wait for the node worker."""


class NodeWorker:
    """Runs every job on the node on one dedicated thread."""

    def __init__(self, node: GossipNode, clock: Callable[[], float]) -> None:
        self.node = node
        self.clock = clock
        """Wall clock for frame timestamps, read on the worker when the work runs."""
        self.pending = PendingPublish()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gossip-node")
        self.queued_for_others = 0
        """Jobs of `for_others` queued or running."""
        self._protocol_lock = threading.Lock()
        self._protocol_cpu_s = 0.0

    # ------------------------------------------------------------------ the named jobs
    async def publish(self) -> tuple[int, str | None] | None:
        """Publish the newest handed-over copy (`publish_pending`)."""
        return await self.job("publish_pending", self.publish_pending)

    async def build_request(self, key: bytes | None) -> bytes:
        """The body of an exchange with the peer of `key` (None: not known yet), stamped now."""
        return await self.job("build_request", lambda: self.node.build_request(key, self.clock()))

    async def handle_response(self, reply: bytes) -> ExchangeResult:
        """Verify and apply the answer to one of our exchanges."""
        return await self.job("handle_response", lambda: self.node.handle_response(reply, self.clock()))

    async def handle_request(self, body: bytes | bytearray, address: str,
                             verified: frozenset[bytes]) -> tuple[bytes, ExchangeResult]:
        """Answer an exchange from `address` (`verified`: the session's verified keys, read on the
        loop that owns them)."""
        return await self.job("handle_request", lambda: self.node.handle_request(
            body, self.clock(), address=address, verified=verified), ours=False)

    async def read_state(self, data: bytes) -> tuple[torch.Tensor, int]:
        """Verify a fetched state frame: its parameters and step."""
        return await self.job("read_state", lambda: self.node.read_state(data, self.clock()))

    async def state_frame(self) -> bytes:
        """Our signed state, as GET /v1/state serves it."""
        return await self.job("state_frame", lambda: self.node.state_frame(self.clock()), ours=False)

    async def adopt(self, x: torch.Tensor, step: int) -> None:
        """Restart our public copy from an adopted state at `step`."""
        await self.job("adopt", lambda: self.node.adopt(x, step))

    async def forget(self, key: bytes) -> None:
        """Drop what the node holds of an evicted peer."""
        await self.job("forget", lambda: self.node.forget(key))

    # ------------------------------------------------------------------ running them
    async def job(self, task: str, work: Callable[[], T], ours: bool = True) -> T:
        """Run `work()` on the worker thread, its CPU time counted under `task`; `work` may touch
        the node. `ours=False`: work our publish cadence does not cause, which the publish budget
        does not count: answering other peers (paid at their cadence; counted, a stranger's
        requests would slow our publishes) and the status page's summaries."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._timed, task, work, ours)

    async def for_others(self, limit: int, job: Callable[[], Awaitable[T]]) -> T:
        """Queue `job()` (a named job), for work another peer asks of us: WorkerBusy when `limit`
        such jobs already wait.

        Our own work (publish, our exchanges, the status summary) is bounded by the session and
        always queued; the work of others is bounded here, however many addresses send it."""
        if self.queued_for_others >= limit:
            raise WorkerBusy(f"{self.queued_for_others} requests already wait for the node worker")
        self.queued_for_others += 1
        try:
            return await job()
        finally:
            self.queued_for_others -= 1

    def protocol_cpu_s(self) -> float:
        """Any thread: the worker's CPU seconds on our own gossip jobs so far (`job`'s `ours`)."""
        with self._protocol_lock:
            return self._protocol_cpu_s

    def _timed(self, task: str, work: Callable[[], T], ours: bool) -> T:
        start = time.thread_time()
        try:
            return work()
        finally:
            spent = time.thread_time() - start
            self.node.metrics.inc("worker_cpu_seconds_total", spent, task=task)
            if ours:
                with self._protocol_lock:
                    self._protocol_cpu_s += spent

    def publish_pending(self) -> tuple[int, str | None] | None:
        """On the worker: publish the newest handed-over copy; (step, error) or None if none."""
        item = self.pending.take()
        if item is None:
            return None
        x, step, outside = item
        try:
            self.node.publish(x, step, self.clock(), outside, scratch=True)
        except ValueError as exc:  # non-finite parameters: nothing sane to publish
            return step, str(exc)
        finally:
            self.pending.finished()
        return step, None

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
