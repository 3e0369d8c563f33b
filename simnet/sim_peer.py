"""One simulated peer: the real GossipNode and NeighbourTable, driven by virtual time.

This is `peer.runtime.GossipPeer` + `peer.network.Network` with the sockets and threads
replaced by scheduler events, and nothing else changed: a step ends, the node mixes; when
a publish is due the parameters are copied and the peer asks for an exchange; the
exchange worker publishes the newest pending copy and, if fewer than MAX_IN_FLIGHT
exchanges are running, starts one more with a neighbour not already being talked to (as
`Network._exchange_worker`; a request made while the limit is reached only publishes);
a joining peer answers exchanges with a failure (the HTTP 503 of `peer/http_app.py`);
the exchange body goes over a simulated link, the neighbour's node answers, failures and
timeouts feed the neighbour table, which evicts dead peers and makes the node forget them.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Callable

import torch

from peer.discovery import PeerInfo
from peer.gossip.config import GossipConfig
from peer.gossip.node import GossipNode
from peer.neighbours import NeighbourConfig, NeighbourTable
from peer.network import MAX_IN_FLIGHT
from peer.trainer import Trainer
from protocol import FrameRefused, Identity
from simnet.attacks import AttackTrainer, append_frame, forge_non_finite_update

if TYPE_CHECKING:
    from simnet.swarm import GossipSim

HTTP_OVERHEAD = 300
"""Bytes of HTTP request/response headers around every body."""
STATE_REQUEST_BYTES = 200


class SimPeer:
    def __init__(self, sim: "GossipSim", index: int, identity: Identity, attacker: bool) -> None:
        self.sim, self.index, self.identity, self.attacker = sim, index, identity, attacker
        self.address = f"peer{index}.sim:7000"
        self.rng = random.Random(f"simnet-peer:{sim.seed}:{index}")
        self.online = False
        self.departure = ""  # "crash" | "leave" while offline
        self.life = 0  # incarnation: events of an older one are ignored
        self.diverged = False
        self.joining = False  # fetching a neighbour's state: online, not yet training
        self.loss_ema: float | None = None  # recent training loss, for models without an evaluator
        self.trainer: Trainer | None = None
        self.node: GossipNode | None = None
        self.table: NeighbourTable | None = None
        self.metrics = sim.new_metrics()
        self._in_flight: dict[int, str] = {}  # token -> neighbour address, as Network._in_flight
        self._join_token = 0  # the state fetch in progress while joining
        self._token = 0
        self._pending: tuple[torch.Tensor, int] | None = None  # newest publish not yet done

    # ------------------------------------------------------------------ lifecycle
    def start(self, trainer: Trainer, gossip_cfg: GossipConfig, join: bool) -> None:
        """Come online as a fresh process (same key); join by fetching a neighbour's state."""
        self.life += 1
        self.online, self.departure, self.diverged, self.loss_ema = True, "", False, None
        self._in_flight, self._join_token, self._pending = {}, 0, None
        self.trainer = trainer
        self.metrics = self.sim.new_metrics()  # one per incarnation, summed by the sim
        self.node = GossipNode(
            gossip_cfg, self.identity, trainer.param_spec(), trainer.get_flat_params(),
            clock=self.sim.clock, listen=self.address, metrics=self.metrics,
        )
        if isinstance(trainer, AttackTrainer):
            node = self.node
            trainer.peek = lambda: [n.copy.x_hat for n in node.neighbours.values() if n.copy.x_hat is not None]
            trainer.armed = True
        self.table = NeighbourTable(NeighbourConfig(self_peer_id=self.identity.peer_id, self_addresses=(self.address,)))
        if join:
            found = self.sim.discover(self)
            if self.sim.world.churn.fetch_state:
                self.joining = True
                self.node.accepting = False  # as peer/runtime.py: exchanges get 503 until adopted
                self._join(found, self.life)
                return
        self._schedule_step()

    def stop(self, how: str) -> None:
        """Crash (silent) or leave (address refuses connections); pending events die with the process."""
        if not self.online:
            return
        self.online, self.departure, self.joining = False, how, False
        self.life += 1
        if self.trainer is not None:
            self.trainer.close()
        self.trainer = self.node = self.table = None

    def learn(self, other: "SimPeer") -> None:
        """Discovery (mDNS-like): an online topology neighbour announced itself."""
        if self.table is not None:
            info = PeerInfo(peer_id=other.identity.peer_id, address=other.address, source="mdns")
            self.table.add(info, self.sim.now())

    # ------------------------------------------------------------------ training
    def _schedule_step(self) -> None:
        if self.joining:  # the join is over (adopted a state, or found nobody): accept exchanges
            self.joining = False
            if self.node is not None:
                self.node.accepting = True
        life = self.life
        self.sim.sched.after(self.sim.speed.step_time(self.index), lambda: self._on_step(life))

    def _on_step(self, life: int) -> None:
        if life != self.life or not self.online or self.diverged:
            return
        assert self.trainer is not None and self.node is not None
        stats = self.trainer.step()
        self.sim.peer_steps += 1
        self.loss_ema = stats.loss if self.loss_ema is None else 0.9 * self.loss_ema + 0.1 * stats.loss
        # As peer/runtime.py: mix at the boundary; a due publish is handed to the network
        # side with a copy of the parameters taken here (see want_exchange).
        due = self.node.on_step_boundary(self.trainer, stats, publish_now=False)
        if not self.attacker and not math.isfinite(stats.loss):
            self._broken()
            return
        if due:
            self._pending = (self.trainer.get_flat_params(), stats.step)
            self.want_exchange()
        self._schedule_step()

    def _broken(self) -> None:
        """An honest peer whose parameters or public copy went non-finite: it stops training.

        A real peer would crash here too: the encoder refuses to sign non-finite vectors.
        It stays reachable (and answers errors), as a wedged process would.
        """
        if not self.diverged:
            self.diverged = True
            self.metrics.inc("diverged_total")

    # ------------------------------------------------------------------ exchanges
    def want_exchange(self) -> None:
        """As one wake of Network._exchange_worker: publish, then maybe start one exchange.

        Publishing takes no virtual time here (the real peer compresses off the training
        thread), so every request is one wake: the newest pending copy is published, and
        one more exchange starts if fewer than MAX_IN_FLIGHT are running, with a random
        live neighbour not already being talked to. A request made while the limit is
        reached only publishes; a finished exchange does not start another.
        """
        assert self.node is not None and self.table is not None
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                self.node.publish(*pending)
            except ValueError:
                # The encoder refuses a non-finite vector: an attacker publishing NaN, or an
                # honest peer whose parameters blew up (it can no longer gossip: diverged).
                if not self.attacker:
                    self._broken()
                    return
                self.metrics.inc("non_finite_blocked_at_sender_total")
        now = self.sim.now()
        for info in self.table.evict_dead(now):
            self.metrics.inc("evictions_total")
            if info.peer_id:
                self.node.forget(bytes.fromhex(info.peer_id))
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            return
        chosen = self.table.choose(self.rng, k=1, exclude=tuple(self._in_flight.values()))
        if not chosen:
            return
        info = chosen[0]
        j = self.sim.index_of[info.address]
        key = bytes.fromhex(info.peer_id) if info.peer_id else None
        try:
            body = self._outgoing(self.node.build_request(key))
        except ValueError:  # our public copy is no longer finite: the encoder refuses it
            self._broken()
            return
        self._token += 1
        token, life = self._token, self.life
        self._in_flight[token] = info.address

        def on_reply(reply: bytes | None) -> None:
            self._on_reply(token, life, info, now, reply)

        self.sim.links.send(self.index, j, len(body) + HTTP_OVERHEAD,
                            lambda: self.sim.peers[j].serve_exchange(self.index, body, on_reply))
        self.sim.sched.after(self.sim.links.cfg.request_timeout_s, lambda: self._on_timeout(token, life, info))

    def _outgoing(self, body: bytes) -> bytes:
        if self.attacker and self.sim.attack.kind == "nan" and self.node is not None:
            self.metrics.inc("forged_frames_total")
            return append_frame(body, forge_non_finite_update(self.node), self.node)
        return body

    def serve_exchange(self, src: int, body: bytes, reply_to: Callable[[bytes | None], None]) -> None:
        """POST /v1/exchange arrived from peer `src`; answer it over the reverse link."""
        if not self.online:
            if self.departure == "leave":  # connection refused: the requester learns within one trip back
                self.sim.sched.after(self.sim.links.latency(self.index, src), lambda: reply_to(None))
            return  # a crashed host is silent: the requester times out
        assert self.node is not None
        if not self.node.accepting:  # still joining: HTTP 503, as peer/http_app.py answers
            self.metrics.inc("exchanges_refused_joining_total")
            self.sim.links.send(self.index, src, HTTP_OVERHEAD, lambda: reply_to(None))
            return
        try:
            reply, result = self.node.handle_request(body)
        except FrameRefused as exc:  # HTTP 400, as peer/http_app.py answers
            self.metrics.inc("frames_refused_total", reason=exc.reason.value)
            self.sim.links.send(self.index, src, HTTP_OVERHEAD, lambda: reply_to(None))
            return
        except ValueError:  # our own state is not finite any more: HTTP 500
            self._broken()
            self.sim.links.send(self.index, src, HTTP_OVERHEAD, lambda: reply_to(None))
            return
        self._on_inbound(result.listen, result.sender)
        reply = self._outgoing(reply)
        self.sim.links.send(self.index, src, len(reply) + HTTP_OVERHEAD, lambda: reply_to(reply))

    def _on_inbound(self, listen: str, sender: bytes) -> None:
        """As Network._on_inbound: a peer that exchanged with us is alive at its listen address."""
        if not listen or self.table is None:
            return
        now = self.sim.now()
        try:
            info = PeerInfo(peer_id=sender.hex(), address=listen, source="exchange")
        except ValueError:
            return
        if info.address in self.sim.index_of:
            self.table.add(info, now)
            self.table.mark_success(listen, now, peer_id=sender.hex())

    def _on_reply(self, token: int, life: int, info: PeerInfo, t0: float, reply: bytes | None) -> None:
        if life != self.life or token not in self._in_flight or not self.online:
            return
        assert self.node is not None and self.table is not None
        now = self.sim.now()
        if reply is None:
            self._failed(token, info)
            return
        try:
            result = self.node.handle_response(reply)
        except FrameRefused as exc:
            self.metrics.inc("frames_refused_total", reason=exc.reason.value)
            self._failed(token, info)
            return
        self.table.mark_success(info.address, now, peer_id=result.sender.hex(), rtt=now - t0)
        self.metrics.inc("exchanges_ok_total")
        self._finish(token)

    def _on_timeout(self, token: int, life: int, info: PeerInfo) -> None:
        if life == self.life and token in self._in_flight and self.online:
            self.metrics.inc("exchange_timeouts_total")
            self._failed(token, info)

    def _failed(self, token: int, info: PeerInfo) -> None:
        assert self.table is not None
        self.table.mark_failure(info.address, self.sim.now())
        self.metrics.inc("exchange_failures_total")
        self._finish(token)

    def _finish(self, token: int) -> None:
        """As _tracked_exchange's `finally`: the neighbour may be chosen again."""
        self._in_flight.pop(token, None)

    # ------------------------------------------------------------------ joining
    def _join(self, candidates: list["SimPeer"], life: int) -> None:
        """GET /v1/state from one neighbour after another until one answers; then train."""
        if life != self.life or not self.online:
            return
        if not candidates:
            self.metrics.inc("joins_alone_total")
            self._schedule_step()
            return
        other, rest = candidates[0], candidates[1:]
        token = self._token = self._token + 1
        self._join_token = token

        def answered(data: bytes | None) -> None:
            if life != self.life or token != self._join_token or not self.online:
                return
            self._join_token = 0
            if data is None:
                self._join(rest, life)
                return
            assert self.node is not None and self.trainer is not None
            try:
                x, _ = self.node.read_state(data)
            except FrameRefused as exc:
                self.metrics.inc("frames_refused_total", reason=exc.reason.value)
                self._join(rest, life)
                return
            self.trainer.set_flat_params(x)
            self.node.adopt(x)
            self.metrics.inc("joins_total")
            self._schedule_step()

        def timeout() -> None:
            if life == self.life and token == self._join_token:
                answered(None)

        self.sim.links.send(self.index, other.index, STATE_REQUEST_BYTES,
                            lambda: other.serve_state(self.index, answered))
        self.sim.sched.after(self.sim.links.cfg.request_timeout_s, timeout)

    def serve_state(self, src: int, reply_to: Callable[[bytes | None], None]) -> None:
        """GET /v1/state: a signed snapshot of the parameters at our last publish."""
        if not self.online:
            if self.departure == "leave":
                self.sim.sched.after(self.sim.links.latency(self.index, src), lambda: reply_to(None))
            return
        assert self.node is not None
        try:
            data = self.node.state_frame()
        except ValueError:  # our parameters are not finite: HTTP 500
            self._broken()
            self.sim.links.send(self.index, src, HTTP_OVERHEAD, lambda: reply_to(None))
            return
        self.sim.links.send(self.index, src, len(data) + HTTP_OVERHEAD, lambda: reply_to(data))

    # ------------------------------------------------------------------ observation
    def honest_params(self) -> torch.Tensor | None:
        """The parameters this peer trains with (an attacker's honest ones are not used)."""
        if not self.online or self.trainer is None:
            return None
        inner = self.trainer.inner if isinstance(self.trainer, AttackTrainer) else self.trainer
        return inner.get_flat_params()
