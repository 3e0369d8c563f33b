"""A real peer: training on the calling thread, the network on an event-loop thread, node work
on the node worker thread, both at a lower priority than training (`NetConfig.network_nice`).
See docs/architecture.md for the thread model.

A `GossipPeer` is handed its parts whole (`PeerParts`, built by `peer.startup.build_peer`:
the resumed trainer, the final configs, node, node worker, driver, HTTP server, loss history).
`run()` only starts them: the HTTP server, then the driver (discovery, client, timer); it
waits while the session joins a running swarm (adopting a further-along neighbour's signed
state when there is one), then trains. At every step boundary the training thread mixes from
the newest immutable view of the neighbour copies and, when a publish is due, hands over a
copy of its parameters; it never waits for compression, signing, decoding or the network.

Stopped while joining (Ctrl+C, SIGTERM), it first stops the network, which lets an adoption
or a probe under way finish and starts none, then writes the final checkpoint: the
trainer's own state or the whole adopted one, never parameters half replaced. A network
stop that overruns `STOP_WAIT_S` is reported and left behind; the run's result stands.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Protocol

import torch

from peer.local import averaged_weights
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.boundary import BoundaryHook
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.net.driver import AsyncDriver
from peer.net.http_server import SHUTDOWN_TIMEOUT_S, HttpServer
from peer.local.loop import LoopConfig, LoopResult, StepHook, run_loop
from peer.local.status_history import LossHistory
from peer.metrics import Metrics
from peer.net.node_worker import NodeWorker
from peer.protocol_time import ProtocolTime
from peer.net.shard_routes import ShardServer
from peer.net.thread_priority import lower_this_thread
from peer.trainer import Trainer
from protocol import Identity

STOP_WAIT_S = 4 * SHUTDOWN_TIMEOUT_S + 10.0
"""How long stopping the network may take: an adoption under way, discovery, and the server,
which ends requests in progress within twice `peer.net.http_server.SHUTDOWN_TIMEOUT_S`."""


class CorpusService(Protocol):
    """A corpus the peer shares beside gossip (`gossip_tts.apps.swarm_data.SwarmData`)."""

    @property
    def shards(self) -> ShardServer:
        """What /v1/shards serves."""
        ...

    def serve(self, neighbours: Callable[[], list[str]], address: Callable[[], str],
              emit: Callable[[str], None]) -> None:
        """As the peer starts: fetch shards and newer manifests from its live, verified
        `neighbours()` too, never from itself (`address()`)."""
        ...


@dataclass(frozen=True)
class PeerParts:
    """Everything a `GossipPeer` runs, built before it starts (`peer.startup.build_parts`).

    The configs are the final ones (trusted keys, the trainer's capabilities applied) and
    the trainer is already resumed: `loop_cfg` asks for no resume again."""

    trainer: Trainer
    loop_cfg: LoopConfig
    gossip_cfg: GossipConfig
    session_cfg: SessionConfig
    identity: Identity
    node: GossipNode
    worker: NodeWorker
    driver: AsyncDriver
    http: HttpServer
    metrics: Metrics
    """The registry /metrics shows (an app that counts into its own passes it to the builder)."""
    history: LossHistory
    """The loss curve the loop records into and /v1/status shows."""
    emit: Callable[[str], None]
    corpus: CorpusService | None
    """The corpus this peer shares (None: it shares none; /v1/shards answers 404)."""


class GossipPeer:
    """One networked peer, built whole from its parts; `run()` starts, trains and stops it."""

    def __init__(self, parts: PeerParts) -> None:
        self.trainer, self.loop_cfg, self.identity = parts.trainer, parts.loop_cfg, parts.identity
        self.gossip_cfg, self.session_cfg = parts.gossip_cfg, parts.session_cfg
        self.node, self.worker, self.driver, self.http = parts.node, parts.worker, parts.driver, parts.http
        self.metrics, self.history, self.emit, self.corpus = parts.metrics, parts.history, parts.emit, parts.corpus
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_network, name="gossip-net", daemon=True)
        self._network_up = False

    def _run_network(self) -> None:
        """The event loop's thread: at a lower priority than training's (`NetConfig.network_nice`),
        which the threads it starts (the node worker) inherit."""
        why = lower_this_thread(self.driver.net_cfg.network_nice)
        if why:
            self.emit(why)
        self._loop.run_forever()

    def make_hook(self) -> StepHook:
        """The step-boundary hook the training loop runs (benchmarks wrap it to switch gossip off)."""
        return BoundaryHook(Mixer(self.gossip_cfg, self.session_cfg.pulls), self.node.view_slot, self.worker.pending,
                            self.driver.notify_boundary, self.metrics, self.gossip_cfg.publish_cadence(), time.time,
                            self.node.partner_steps.taken(), ProtocolTime(time.perf_counter, self.worker.protocol_cpu_s),
                            rounding_seed=secrets.randbits(63), device=self.node.device)

    @property
    def address(self) -> str:
        """The address this peer advertises ("" until its server is up)."""
        return self.driver.address

    def verified_addresses(self) -> list[str]:
        """From any thread but the event loop's: the live neighbours that have answered us
        ([] before the network is up)."""
        return self.driver.verified_addresses()

    def averaged_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The node's averaged weights as checkpoint tensors (peer.local.averaged_weights); any thread."""
        return averaged_weights.checkpoint_tensors(self.node.average, self.trainer.param_spec())

    def _call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run `coro` on the event loop and wait for it; one that overruns `timeout` is cancelled."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def run(self, stop: threading.Event | None = None) -> LoopResult:
        """Start the network, wait for the join, train until `stop` (or Ctrl+C, or `max_steps`), stop."""
        stop = stop or threading.Event()
        if self.corpus is not None:
            self.corpus.serve(self.verified_addresses, lambda: self.address, self.emit)
        hook = self.make_hook()
        self._thread.start()
        try:
            self._network_up = True
            address = self._call(self._start_network(), timeout=60)
            self.emit(f"listening on http://{address} peer_id={self.identity.peer_id}")
            interrupted = self._wait_for_join(stop)
            if interrupted is not None:
                return self._stop_while_joining(interrupted)
            if self.driver.join_error is not None:  # no checkpoint of a half-loaded state: the last good one stays
                raise RuntimeError(f"loading a neighbour's state failed ({self.driver.join_error}); the parameters "
                                   "may be part replaced, so this run stops here") from self.driver.join_error
            return run_loop(self.trainer, self.loop_cfg, stop=stop, hooks=[hook], emit=self.emit, metrics=self.metrics,
                            loss_history=self.history, extra_state=self.averaged_state)
        finally:
            try:
                self._stop_network()
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=30)
                self._loop.close()
                self.worker.close()

    async def _start_network(self) -> str:
        """The server first: the driver advertises the port it bound."""
        return await self.driver.async_start(await self.http.start())

    async def _stop_serving(self) -> None:
        """The driver first (it lets an adoption under way finish), then the server."""
        await self.driver.async_stop()
        await self.http.stop()

    def _wait_for_join(self, stop: threading.Event) -> bool | None:
        """Wait while the session joins (or gives up) on its own deadlines: None once joined;
        whether it was Ctrl+C (True) or `stop` (False) that ended the wait first."""
        try:
            while not self.driver.joined.wait(0.1):
                if stop.is_set():
                    return False
        except KeyboardInterrupt:
            return True
        return None

    def _stop_while_joining(self, interrupted: bool) -> LoopResult:
        """The final checkpoint of a peer stopped before training: taken once nothing else can
        touch the trainer, so it holds our own state or a whole adopted one."""
        self.emit("interrupted while joining; writing a final checkpoint" if interrupted else "stopped while joining")
        self._stop_network()
        done = threading.Event()
        done.set()  # run_loop then trains no step and only writes its final checkpoint
        result = run_loop(self.trainer, self.loop_cfg, stop=done, emit=self.emit, metrics=self.metrics,
                          loss_history=self.history, extra_state=self.averaged_state)  # a resumed or adopted average is not dropped
        return dataclasses.replace(result, interrupted=interrupted)

    def _stop_network(self) -> None:
        """Stop serving and cancel the session's tasks, then wait for work they left on executor
        threads (a probe swaps parameters in and out, an adoption loads them): afterwards only
        this thread uses the trainer, which holds its own state or a whole adopted one. A stop
        that overruns `STOP_WAIT_S` is reported, not raised: the result and checkpoint stand."""
        if not self._network_up:
            return
        self._network_up = False
        try:
            self._call(self._stop_serving(), timeout=STOP_WAIT_S)
        except concurrent.futures.TimeoutError:
            self.emit(f"the network did not stop within {STOP_WAIT_S:g} s; left unfinished")
        finally:
            self._call(self._loop.shutdown_default_executor(), timeout=60)
