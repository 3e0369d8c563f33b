"""A real peer: training on the calling thread, the network on an event-loop thread, node work
on the node worker thread. See docs/architecture.md for the thread model.

`GossipPeer.run()` starts the network (the HTTP server, then the driver: discovery,
client, timer), waits while the session joins a
running swarm (adopting a further-along neighbour's signed state when there is one), then
trains. At every step boundary the training thread mixes from the newest immutable view of
the neighbour copies and, when a publish is due, hands over a copy of its parameters; it
never waits for compression, signing, decoding or the network.

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
from typing import Any, Callable, Coroutine

import torch

from peer.local import averaged_weights
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.boundary import BoundaryHook
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.net.driver import AsyncDriver
from peer.net.http_server import SHUTDOWN_TIMEOUT_S, HttpServer
from peer.local.loop import LoopConfig, LoopResult, StepHook, resume_if_asked, run_loop
from peer.local.status_history import LossHistory
from peer.metric_help import expose_from_start
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.node_worker import NodeWorker
from peer.protocol_time import ProtocolTime
from peer.net.shard_routes import ShardServer
from peer.trainer import Trainer
from peer.net.trust import load_trusted_keys
from protocol import Identity

STOP_WAIT_S = 4 * SHUTDOWN_TIMEOUT_S + 10.0
"""How long stopping the network may take: an adoption under way, discovery, and the server,
which ends requests in progress within twice `peer.net.http_server.SHUTDOWN_TIMEOUT_S`."""


class GossipPeer:
    """One networked peer. `metrics` is the registry /metrics shows (an app that counts into
    its own passes it); `shards` serves /v1/shards (None: this peer shares no corpus)."""

    def __init__(
        self,
        trainer: Trainer,
        loop_cfg: LoopConfig,
        gossip_cfg: GossipConfig,
        net_cfg: NetConfig,
        identity: Identity,
        emit: Callable[[str], None] = print,
        session_cfg: SessionConfig | None = None,
        metrics: Metrics | None = None,
        shards: ShardServer | None = None,
    ) -> None:
        self.trainer, self.loop_cfg, self.gossip_cfg, self.net_cfg = trainer, loop_cfg, gossip_cfg, net_cfg
        self.session_cfg = session_cfg or SessionConfig()
        self.identity, self.emit, self.shards = identity, emit, shards
        self.metrics = metrics if metrics is not None else Metrics()
        self.history = LossHistory()
        """The loss curve the training loop records into and /v1/status shows."""
        expose_from_start(self.metrics)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gossip-net", daemon=True)
        self.node: GossipNode | None = None
        self.worker: NodeWorker | None = None
        self.driver: AsyncDriver | None = None
        self.http: HttpServer | None = None
        self._network_up = False

    def make_hook(self) -> StepHook:
        """The step-boundary hook the training loop runs (benchmarks wrap it to switch gossip off)."""
        assert self.node is not None and self.worker is not None and self.driver is not None
        return BoundaryHook(Mixer(self.gossip_cfg, self.session_cfg.pulls), self.node.view_slot, self.worker.pending,
                            self.driver.notify_boundary, self.metrics, self.gossip_cfg.publish_cadence(), time.time,
                            self.node.partner_steps.taken(), ProtocolTime(time.perf_counter, self.worker.protocol_cpu_s))

    @property
    def address(self) -> str:
        """The address this peer advertises ("" until its server is up)."""
        return self.driver.address if self.driver is not None else ""

    def verified_addresses(self) -> list[str]:
        """From any thread but the event loop's: the live neighbours that have answered us
        ([] before the network is up)."""
        return self.driver.verified_addresses() if self.driver is not None else []

    def averaged_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The node's averaged weights as checkpoint tensors (peer.local.averaged_weights); any thread."""
        if self.node is None:
            return {}, {}
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
        stop = stop or threading.Event()
        resumed = resume_if_asked(self.trainer, self.loop_cfg, self.emit)
        if self.net_cfg.trusted_keys:
            keys = load_trusted_keys(self.net_cfg.trusted_keys) | {self.identity.public_key}
            self.gossip_cfg = dataclasses.replace(self.gossip_cfg, allowed_keys=keys)
            self.emit(f"private swarm: talking only to the {len(keys) - 1} keys in {self.net_cfg.trusted_keys}")
        self.gossip_cfg = self.gossip_cfg.for_trainer(self.trainer.capabilities.additive_steps)
        self.session_cfg = self.session_cfg.for_partner_steps(self.gossip_cfg.partner_steps > 0)
        self.node = GossipNode(
            self.gossip_cfg, self.identity, self.trainer.param_spec(), self.trainer.get_flat_params(),
            now=time.time(), metrics=self.metrics, entropy=secrets.token_bytes(16),
        )
        if resumed is not None:  # before the node worker runs: this thread still owns the node
            averaged_weights.restore(self.node.average, self.trainer.param_spec(), *resumed)
        self.worker = NodeWorker(self.node, time.time)
        self.driver = AsyncDriver(self.worker, self.session_cfg, self.net_cfg, self.metrics, self.emit,
                                  on_adopt=self.trainer.adopt,
                                  probe=self.trainer.probe_better if self.trainer.capabilities.probe else None)
        self.http = HttpServer(self.driver, self.worker, self.net_cfg, self.metrics, self.session_cfg,
                               self.history, self.shards)
        hook = self.make_hook()
        self._thread.start()
        try:
            self._network_up = True
            address = self._call(self._start_network(), timeout=60)
            self.emit(f"listening on http://{address} peer_id={self.identity.peer_id}")
            loop_cfg = LoopConfig(**{**self.loop_cfg.__dict__, "resume": False})  # already resumed above
            interrupted = self._wait_for_join(stop)
            if interrupted is not None:
                return self._stop_while_joining(loop_cfg, interrupted)
            if self.driver.join_error is not None:  # no checkpoint of a half-loaded state: the last good one stays
                raise RuntimeError(f"loading a neighbour's state failed ({self.driver.join_error}); the parameters "
                                   "may be part replaced, so this run stops here") from self.driver.join_error
            return run_loop(self.trainer, loop_cfg, stop=stop, hooks=[hook], emit=self.emit, metrics=self.metrics,
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
        assert self.driver is not None and self.http is not None
        return await self.driver.async_start(await self.http.start())

    async def _stop_serving(self) -> None:
        """The driver first (it lets an adoption under way finish), then the server."""
        assert self.driver is not None and self.http is not None
        await self.driver.async_stop()
        await self.http.stop()

    def _wait_for_join(self, stop: threading.Event) -> bool | None:
        """Wait while the session joins (or gives up) on its own deadlines: None once joined;
        whether it was Ctrl+C (True) or `stop` (False) that ended the wait first."""
        assert self.driver is not None
        try:
            while not self.driver.joined.wait(0.1):
                if stop.is_set():
                    return False
        except KeyboardInterrupt:
            return True
        return None

    def _stop_while_joining(self, loop_cfg: LoopConfig, interrupted: bool) -> LoopResult:
        """The final checkpoint of a peer stopped before training: taken once nothing else can
        touch the trainer, so it holds our own state or a whole adopted one."""
        self.emit("interrupted while joining; writing a final checkpoint" if interrupted else "stopped while joining")
        self._stop_network()
        done = threading.Event()
        done.set()  # run_loop then trains no step and only writes its final checkpoint
        result = run_loop(self.trainer, loop_cfg, stop=done, emit=self.emit, metrics=self.metrics,
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
        assert self.driver is not None
        try:
            self._call(self._stop_serving(), timeout=STOP_WAIT_S)
        except concurrent.futures.TimeoutError:
            self.emit(f"the network did not stop within {STOP_WAIT_S:g} s; left unfinished")
        finally:
            self._call(self._loop.shutdown_default_executor(), timeout=60)
