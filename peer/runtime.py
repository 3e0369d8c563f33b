"""A real peer: training on the calling thread, networking on an event-loop thread.

`GossipPeer.run()` starts the network (server, discovery), optionally joins a running
swarm by adopting a further-along neighbour's signed state, then trains; every step
boundary mixes in received news and, every few steps, publishes and asks for an exchange.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

from peer.gossip.config import GossipConfig
from peer.gossip.node import GossipNode
from peer.loop import LoopConfig, LoopResult, resume_if_asked, run_loop
from peer.metrics import Metrics
from peer.net_config import NetConfig
from peer.network import Network
from peer.trainer import StepStats, Trainer
from protocol import Identity


class GossipPeer:
    def __init__(
        self,
        trainer: Trainer,
        loop_cfg: LoopConfig,
        gossip_cfg: GossipConfig,
        net_cfg: NetConfig,
        identity: Identity,
        emit: Callable[[str], None] = print,
    ) -> None:
        self.trainer, self.loop_cfg, self.gossip_cfg, self.net_cfg = trainer, loop_cfg, gossip_cfg, net_cfg
        self.identity, self.emit = identity, emit
        self.metrics = Metrics()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gossip-net", daemon=True)
        self.node: GossipNode | None = None
        self.network: Network | None = None

    def _call(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def run(self, stop: threading.Event | None = None) -> LoopResult:
        resume_if_asked(self.trainer, self.loop_cfg, self.emit)
        self.node = GossipNode(
            self.gossip_cfg, self.identity, self.trainer.param_spec(), self.trainer.get_flat_params(),
            clock=time.time, metrics=self.metrics,
        )
        self.node.accepting = not self.net_cfg.join
        self.network = Network(self.node, self.net_cfg, self.metrics, self.emit)
        self._thread.start()
        try:
            address = self._call(self.network.async_start(), timeout=60)
            self.emit(f"listening on http://{address} peer_id={self.identity.peer_id}")
            if self.net_cfg.join:
                try:
                    self._join()
                finally:
                    self.node.accepting = True
            loop_cfg = LoopConfig(**{**self.loop_cfg.__dict__, "resume": False})  # already resumed above
            return run_loop(self.trainer, loop_cfg, stop=stop, hooks=[self._on_step], emit=self.emit)
        finally:
            try:
                self._call(self.network.async_stop(), timeout=30)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout=30)
                self._loop.close()

    def _on_step(self, trainer: Trainer, stats: StepStats) -> None:
        assert self.node is not None and self.network is not None
        self.metrics.set("steps", stats.step, help="local training steps")
        self.metrics.set("loss", stats.loss, help="training loss of the last step")
        self.metrics.inc("samples_total", stats.samples, help="training examples consumed")
        if self.node.on_step_boundary(trainer, stats, publish_now=False):
            self.network.want_exchange(trainer.get_flat_params(), stats.step)

    def _join(self) -> None:
        """Adopt the state of the furthest-along neighbour found within `join_wait_s`, if ahead of us."""
        assert self.network is not None and self.node is not None
        deadline = time.monotonic() + self.net_cfg.join_wait_s
        while time.monotonic() < deadline and not self.network.table.live():
            time.sleep(0.1)
        best: tuple[int, str] | None = None
        for info in list(self.network.table.live()):
            hello = self._call(self.network.hello(info.address), timeout=self.net_cfg.request_timeout_s)
            if hello and (best is None or hello["step"] > best[0]):
                best = (hello["step"], info.address)
        if best is None or best[0] <= self.trainer.step_count:
            return
        try:
            data = self._call(self.network.fetch_state(best[1]), timeout=self.net_cfg.request_timeout_s)
            x, step = self.node.read_state(data)
        except Exception as exc:  # a failed join only means we start from our own weights
            self.emit(f"could not fetch state from {best[1]}: {exc}; training from our own weights")
            return
        self.trainer.set_flat_params(x)
        self.node.adopt(x)
        self.emit(f"joined: adopted the state of {best[1]} (its step {step})")
