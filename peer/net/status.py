"""`GET /v1/status` (typed JSON) and `GET /` (the live status page) of a peer.

Thread contract (docs/architecture.md): handlers run on the event loop. They read the
session's neighbour table through the driver's declared queries (`StatusFace`; the loop
owns the table), `Metrics` and the loss history (both thread-safe), and get what only the
node knows (its neighbour copies: their steps, when they were last heard from) as an
immutable `NodeSummary` built on the node worker. They never touch `node.neighbours` themselves.

Typed means: counts and steps are JSON integers, rates and losses are floats, and what is
not known yet (the loss before the first step, a neighbour's round-trip time before the
first reply) is `null`, never 0 or NaN. The fields are listed in docs/quickstart.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import statistics
import time
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, AsyncIterator, Protocol

from aiohttp import web

from peer import cadence_gauges

if TYPE_CHECKING:
    from peer.core.addresses import PeerInfo
    from peer.local.status_history import LossHistory
    from peer.core.node import GossipNode
    from peer.core.table import NeighbourHealth
    from peer.metrics import Metrics
    from peer.net.node_worker import NodeWorker

log = logging.getLogger(__name__)

REFRESH_S = 2.0
"""Seconds between background refreshes of the node summary (neighbour gauge, consensus)."""
SUMMARY_WAIT_S = 2.0
"""How long a status request waits for the node worker before using the last summary."""
CONSENSUS_MIN_S = 30.0
"""Fewest seconds between two consensus-distance computations: a gauge people read, and one
computation reads every parameter of every copy held (docs/benchmarks/protocol-cpu.md#protocol-cpu-by-job)."""
CONSENSUS_DUTY = 0.05
"""Most of the node worker's time the consensus distance may take: it reads every parameter
of every neighbour copy, which at the 800m preset takes seconds that exchanges wait for."""
PEER_LABEL = "peer"
"""The label of per-neighbour series (the first 16 hex digits of the neighbour's key)."""
CONSENSUS_CHUNK = 1 << 22
"""Parameters per chunk of the consensus computation: memory stays O(chunk), not O(model)."""


class StatusFace(Protocol):
    """What the status asks of the driver, on the event loop (the session's thread)."""

    @property
    def address(self) -> str:
        """The address we advertise ("" before the server is up)."""
        ...

    @property
    def step(self) -> int:
        """The step the session last heard of from the training thread."""
        ...

    def mono(self) -> float:
        """The session's clock."""
        ...

    def live_peers(self) -> list["PeerInfo"]:
        """The neighbour table's peers not judged dead."""
        ...

    def known_neighbours(self) -> list["NeighbourHealth"]:
        """Every live table entry and every static one (kept while dead), by address."""
        ...


@dataclass(frozen=True)
class NodeNeighbour:
    """What the node holds of one neighbour, copied on the worker."""

    peer_id: str
    listen: str
    step: int
    last_heard: float  # wall-clock seconds


@dataclass(frozen=True)
class NodeSummary:
    neighbours: tuple[NodeNeighbour, ...]
    consensus_distance: float | None  # None: not computed in this summary, or no neighbour copy
    taken_at: float  # wall-clock seconds


def summarize_node(node: "GossipNode", metrics: "Metrics", consensus: bool) -> NodeSummary:
    """On the node worker: copy what the status needs; update the node-side gauges."""
    rows = tuple(NodeNeighbour(key.hex(), n.listen, int(n.step), float(n.last_heard)) for key, n in node.neighbours.items())
    metrics.set("neighbours", len(rows))
    # Per-neighbour series live as long as the node holds the neighbour (it drops the least
    # recently heard on its own), so one-shot keys leave no series behind.
    metrics.forget_all_but(PEER_LABEL, {key.hex()[:16] for key in node.neighbours})
    now = time.time()
    for key, n in node.neighbours.items():
        if n.copy.x_hat is not None:
            metrics.set("neighbour_age_seconds", now - n.published_at, peer=key.hex()[:16])
    distance = None
    if consensus:
        copies = [n.copy.x_hat for n in node.neighbours.values() if n.copy.x_hat is not None]
        if copies:
            distance = consensus_distance([node.served, *copies])
            metrics.set("consensus_distance", distance)
    return NodeSummary(rows, distance, now)


def consensus_distance(vectors: list[Any], chunk: int = CONSENSUS_CHUNK) -> float:
    """RMS distance of flat vectors to their mean, a chunk at a time (float64 sums)."""
    import torch

    n, numel = len(vectors), int(vectors[0].numel())
    total = 0.0
    for lo in range(0, numel, chunk):
        parts = [v[lo : lo + chunk].to(torch.float64) for v in vectors]
        mean = torch.stack(parts).mean(0)  # n is at most max_neighbours + 1
        total += sum(float(torch.sum((p - mean) ** 2)) for p in parts)
    return math.sqrt(total / n)


def _finite(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


class StatusService:
    """Serves `/v1/status` and `/`, and keeps the node summary and its gauges fresh; the loss
    curve is the `history` the training loop records into."""

    def __init__(self, face: StatusFace, worker: "NodeWorker", metrics: "Metrics", history: "LossHistory") -> None:
        self.face, self.worker, self.metrics, self.history = face, worker, metrics, history
        node = worker.node  # who we are is fixed for the run: read once, not on the loop again
        self.identity = {"peer_id": node.peer_id, "swarm": node.cfg.swarm, "fingerprint": node.fingerprint}
        self.summary: NodeSummary | None = None
        self.consensus: float | None = None
        self._next_consensus = 0.0
        self._page: bytes | None = None
        self._pending: asyncio.Future[NodeSummary] | None = None

    # ------------------------------------------------------------------ node summary
    async def refresh(self, consensus: bool = False) -> NodeSummary:
        """Ask the worker for a new summary (with the consensus distance when asked).

        Requests that arrive while a plain summary is being made share it: a burst of
        /v1/status requests queues one job on the node worker, not one each."""
        if not consensus:
            if self._pending is None or self._pending.done():
                self._pending = asyncio.ensure_future(self._refresh(False))
            return await asyncio.shield(self._pending)
        return await self._refresh(True)

    async def _refresh(self, consensus: bool) -> NodeSummary:
        t0 = time.monotonic()
        summary = await self.worker.job("summarize_node", lambda: summarize_node(self.worker.node, self.metrics, consensus),
                                        ours=False)
        if consensus:
            self.consensus = summary.consensus_distance
            spent = time.monotonic() - t0
            self._next_consensus = time.monotonic() + max(CONSENSUS_MIN_S, spent / CONSENSUS_DUTY)
        self.summary = summary
        return summary

    async def background(self, app: web.Application) -> AsyncIterator[None]:
        """aiohttp cleanup context: refresh the summary every REFRESH_S while the app runs,
        so progress lines and /metrics have the neighbour count and consensus distance
        even when nobody reads /v1/status."""
        task = asyncio.ensure_future(self._refresh_forever())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _refresh_forever(self) -> None:
        while True:
            try:
                await self.refresh(consensus=time.monotonic() >= self._next_consensus)
                self.metrics.set("peers_live", len(self.face.live_peers()))
            except (RuntimeError, ValueError) as exc:  # worker shut down, or a copy vanished mid-read
                log.debug("status refresh failed: %s", exc)
            await asyncio.sleep(REFRESH_S)

    async def _current_summary(self) -> NodeSummary | None:
        try:
            return await asyncio.wait_for(self.refresh(), SUMMARY_WAIT_S)
        except (asyncio.TimeoutError, RuntimeError):  # the worker is busy (a big snapshot) or shut down
            return self.summary

    # ------------------------------------------------------------------ assembly
    def assemble(self, summary: NodeSummary | None) -> dict[str, Any]:
        """The /v1/status object (see the module docstring for its typing rules)."""
        face, metrics = self.face, self.metrics
        history = self.history
        last = history.last()
        steps_per_s, audio_per_s = history.rates()
        step = max(int(face.step), last[0] if last else 0)
        refusals = {labels.get("reason", ""): int(v) for name, labels, v in metrics.series()
                    if name == "frames_refused_total" and v}
        live = face.live_peers()
        return {
            **self.identity,
            "listen": face.address,
            "time": time.time(),
            "step": step,
            "loss": _finite(last[1]) if last else None,
            "steps_per_s": steps_per_s,
            "audio_seconds_per_s": audio_per_s,
            "loss_history": [[s, _finite(loss), t] for s, loss, t in history.points()],
            "neighbours": self._neighbour_rows(summary, step),
            "swarm_size": 1 + len(live),
            "exchanges": int(metrics.total("exchanges_total")),
            "bytes_in": int(metrics.total("bytes_received_total")),
            "bytes_out": int(metrics.total("bytes_sent_total")),
            "refusals": dict(sorted(refusals.items())),
            "median_staleness": _median(metrics.recent("mixed_staleness_steps")[-256:]),
            "consensus_distance": _finite(self.consensus),
            **_cadence(metrics),
        }

    def _neighbour_rows(self, summary: NodeSummary | None, our_step: int) -> list[dict[str, Any]]:
        """Table entries (live, or static ones kept while dead) joined by peer id with the node's copies."""
        mono_now, wall_now = self.face.mono(), time.time()
        held = {n.peer_id: n for n in (summary.neighbours if summary else ())}
        rows: dict[str, dict[str, Any]] = {}
        for health in self.face.known_neighbours():
            info, address = health.info, health.info.address
            rows[info.peer_id or address] = {
                "peer_id": info.peer_id or None, "address": address, "live": not health.dead,
                "rtt_s": health.rtt_s, "step": None, "staleness": None,
                "last_contact_s": None if health.last_success is None else max(0.0, mono_now - health.last_success),
            }
        for peer_id, n in held.items():
            row = rows.setdefault(peer_id, {"peer_id": peer_id, "address": n.listen or None, "live": None,
                                            "rtt_s": None, "last_contact_s": None})
            heard = max(0.0, wall_now - n.last_heard)
            row["step"], row["staleness"] = n.step, max(0, our_step - n.step)
            row["last_contact_s"] = heard if row["last_contact_s"] is None else min(heard, row["last_contact_s"])
        return [{k: row.get(k) for k in ("peer_id", "address", "step", "staleness", "last_contact_s", "rtt_s", "live")}
                for row in rows.values()]

    # ------------------------------------------------------------------ handlers
    async def serve_status(self, request: web.Request) -> web.Response:
        """GET /v1/status."""
        body = self.assemble(await self._current_summary())
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    async def serve_page(self, request: web.Request) -> web.Response:
        """GET /: the status page (one static file: it draws itself from /v1/status)."""
        if self._page is None:
            self._page = resources.files("peer.net").joinpath("static/status.html").read_bytes()
        return web.Response(body=self._page, content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-store"})


def _cadence(metrics: "Metrics") -> dict[str, Any]:
    """The publish cadence: steps per publish aimed at and why, and as measured (null before known)."""
    reading = cadence_gauges.read(metrics)
    period = int(metrics.get("publish_period_steps"))
    return {"publish_every": reading.every if reading else None, "publish_period": period or None,
            "publish_reason": reading.reason() if reading else None}


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None
