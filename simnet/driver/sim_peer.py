"""One simulated peer: simnet's virtual-clock driver of the real peer core.

It decides nothing. The session (`peer.core.session.Session`), the node
(`peer.core.node.GossipNode`) and the step boundary (`peer.boundary.BoundaryHook`) are the
very objects a real peer runs; this driver only performs their actions (the handlers of the
`peer.core.Driver` contract, as the real driver's) over simulated links, on a virtual clock.
Node work runs through a FIFO `SimWorker` that charges each job the CPU time the cost model
(`simnet.world.cost`) gives it, as the real node worker thread takes it; mixing is charged
to the step that does it. A crashed peer is silent (requests time out), a peer that left
refuses connections (requesters learn within one round trip); what it answers to others is
`simnet.driver.sim_server.SimServer`.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any, Callable

import torch

from peer.boundary import BoundaryHook, PendingPublish
from peer.core import (
    Action, Adopt, Count, Driver, Exchange, ExchangeResult, FetchState, FetchedStates, Forget, GossipConfig, GossipNode,
    JoinDone, Log, Mixer, PeerInfo, Publish, SendHello, Session, SessionConfig, perform, read_hello,
)
from peer.trainer import Trainer
from protocol import FrameRefused, Identity
from simnet.driver.sim_server import HTTP_OVERHEAD, SimServer
from simnet.driver.sim_worker import SimWorker
from simnet.world.sim_world import SimWorld



class SimPeer(SimServer, Driver):
    """One slot of the swarm: its key, its address and, while online, its trainer, node and session."""

    attacker = False
    """Attacking peers are subclasses (`simnet.attacks.peers`); this one is honest."""

    def __init__(self, world: SimWorld, index: int, identity: Identity, gossip_cfg: GossipConfig,
                 session_cfg: SessionConfig) -> None:
        self.world, self.index, self.identity = world, index, identity
        self.gossip_cfg, self.session_cfg = gossip_cfg, session_cfg
        self.address = f"peer{index}.sim:7000"
        self.rng = random.Random(f"simnet-peer:{world.seed}:{index}")
        self.nonces = random.Random(f"simnet-nonce:{world.seed}:{index}")  # apart from the session's draws
        self.steps = 0  # training steps taken, over every incarnation
        self.online = False
        self.departure = ""  # "crash" | "leave" while offline
        self.life = 0  # incarnation: events of an older one are ignored
        self.diverged = False
        self.loss_ema: float | None = None  # recent training loss, for models without an evaluator
        self.first_trained_at: float | None = None  # virtual time this slot first began training
        self.trainer: Trainer | None = None
        self.node: GossipNode | None = None
        self.session: Session | None = None
        self.metrics = world.new_metrics()
        self._training = False
        self._tick_at = math.inf
        self._fetched = FetchedStates()
        self._nonce: dict[int, str] = {}  # hello token -> the nonce we asked it to sign

    @property
    def joining(self) -> bool:
        return self.online and self.session is not None and not self.session.accepting

    # ------------------------------------------------------------------ lifecycle
    def start(self, trainer: Trainer, join: bool) -> None:
        """Come online as a fresh process (same key); the session joins when `join`."""
        self.life += 1
        self.online, self.departure, self.diverged, self.loss_ema = True, "", False, None
        self.trainer, self._training, self._tick_at, self._fetched = trainer, False, math.inf, FetchedStates()
        self._nonce = {}
        self.metrics = self.world.new_metrics()  # one per incarnation, summed by the sim
        cfg = self.gossip_cfg.for_trainer(trainer.capabilities.additive_steps)
        self.node = self._make_node(cfg, self.identity, trainer.param_spec(), trainer.get_flat_params(),
                                    now=self.world.clock(), listen=self.address, metrics=self.metrics)
        self.pending = PendingPublish()
        self.worker = SimWorker(self.world.sched, lambda: self.life)
        session_cfg = dataclasses.replace(self.session_cfg, join=join).for_partner_steps(cfg.partner_steps > 0)
        self.session = Session(session_cfg, peer_id=self.identity.peer_id, rng=self.rng)
        self.hook = BoundaryHook(Mixer(cfg, session_cfg.pulls), self.node.view_slot, self.pending, self.on_boundary,
                                 self.metrics, cfg.publish_cadence(), self.world.clock, self.node.partner_steps.taken(),
                                 rounding_seed=self.index)
        self.on_start(self.world.book.bootstrap_for(self.index), step=trainer.step_count)
        if self.session.accepting:
            self._begin_training()

    def stop(self, how: str) -> None:
        """Crash (silent) or leave (address refuses connections); pending events die with the process."""
        if not self.online:
            return
        self.online, self.departure = False, how
        self.life += 1
        if self.trainer is not None:
            self.trainer.close()
        self.trainer = self.node = self.session = None
        self._fetched.clear()

    # ------------------------------------------------------------------ training
    def _begin_training(self) -> None:
        if not self._training:
            self._training = True
            if self.first_trained_at is None:
                self.first_trained_at = self.world.now()
            self._schedule_step(0.0)

    def _schedule_step(self, extra_s: float) -> None:
        life = self.life
        self.world.sched.after(self.world.speed.step_time(self.index) + extra_s, lambda: self._on_step(life))

    def _on_step(self, life: int) -> None:
        if life != self.life or not self.online or self.diverged:
            return
        assert self.trainer is not None and self.node is not None
        stats = self.trainer.step()
        self.steps += 1
        self.loss_ema = stats.loss if self.loss_ema is None else 0.9 * self.loss_ema + 0.1 * stats.loss
        self.hook(self.trainer, stats)
        if not self.attacker and not math.isfinite(stats.loss):
            self.diverged = True  # it would go on training on NaN; stop spending simulation time on it
            self.metrics.inc("diverged_total")
            return
        self._schedule_step(self.world.cost.mix(self.hook.last_mixed, self.node.numel))

    # ------------------------------------------------------------------ events in
    def on_start(self, bootstrap: list[str], step: int) -> None:
        assert self.session is not None
        self.dispatch(self.session.start(self.world.now(), listen=self.address, bootstrap=bootstrap, step=step,
                                         hello_seq_base=int(self.world.clock() * 1e6)))

    def on_found(self, info: PeerInfo) -> None:
        """A discovery source named a peer (simnet's peers only learn through bootstrap and hellos)."""
        assert self.session is not None
        self.dispatch(self.session.found(info, self.world.now()))

    def on_boundary(self, step: int, publish_due: bool) -> None:
        assert self.session is not None
        self.dispatch(self.session.step_boundary(step, publish_due, self.world.now()))

    def on_tick(self) -> None:
        assert self.session is not None
        self.dispatch(self.session.tick(self.world.now()))

    def _timer_fired(self, at: float, life: int) -> None:
        if life == self.life and at == self._tick_at and self.session is not None:
            self._tick_at = math.inf
            self.on_tick()

    # ------------------------------------------------------------------ actions out
    def dispatch(self, actions: list[Action]) -> None:
        if self.session is None:
            return
        if self.world.trace is not None:
            self.world.trace.setdefault(self.index, []).extend(actions)
        for a in actions:
            self.perform(a)
        deadline = self.session.next_deadline() if self.session is not None else math.inf
        if deadline < self._tick_at:
            self._tick_at, life = deadline, self.life
            self.world.sched.at(deadline, lambda: self._timer_fired(deadline, life))

    def perform(self, action: Action) -> None:
        """Do what one action says (`peer.core.perform`: the contract's handler for it)."""
        perform(self, action)

    # ------------------------------------------------------------------ the Driver contract's handlers
    @property
    def publish_slot(self) -> PendingPublish:
        return self.pending

    def publish(self, a: Publish) -> None:
        self.worker.submit(self._publish_job)

    def exchange(self, a: Exchange) -> None:
        self.worker.submit(lambda: self._exchange_job(a))

    def send_hello(self, a: SendHello) -> None:
        self._request(a.address, a.token, "hello", self._hello_reply)

    def fetch_state(self, a: FetchState) -> None:
        self._request(a.address, a.token, "state", self._state_reply)

    def adopt(self, a: Adopt) -> None:
        self.worker.submit(lambda: self._adopt_job(a))

    def join_done(self, a: JoinDone) -> None:
        self.worker.submit(self._join_done_job)  # after any adoption queued before it

    def forget(self, a: Forget) -> None:
        self.worker.submit(lambda key=bytes.fromhex(a.peer_id): self._forget_job(key))

    def log(self, a: Log) -> None:
        """Simulated peers keep quiet; their counters say what happened."""

    def count(self, a: Count) -> None:
        self.metrics.inc(a.name, a.value, **dict(a.labels))

    def _node(self) -> GossipNode:
        assert self.node is not None
        return self.node

    def _publish_job(self) -> tuple[float, Callable[[], None] | None]:
        item = self.pending.take()
        if item is None:
            return 0.0, None
        node, (x, step, outside) = self._node(), item
        error: str | None = None
        try:
            node.publish(x, step, self.world.clock(), outside, scratch=True)
        except ValueError as exc:
            error = str(exc)
        cost = self.world.cost.publish(node.numel * self._vectors(), node.last_publish_bytes)

        def done() -> None:  # the simulated worker is free once the publish's cost has elapsed
            self.pending.finished()
            self.dispatch(self._sess().publish_done(step, self.world.now(), error))

        return cost, done

    def _sess(self) -> Session:
        assert self.session is not None
        return self.session

    def _exchange_job(self, a: Exchange) -> tuple[float, Callable[[], None] | None]:
        node = self._node()
        snapshots = self.metrics.total("snapshots_sent_total")
        body = node.build_request(bytes.fromhex(a.peer_id) if a.peer_id else None, self.world.clock())
        t0, life = self.world.now(), self.life
        if self.world.book.index_of(a.address) is None:  # made up: no peer ever listened there
            self.metrics.inc("exchanges_to_made_up_total")
            self.metrics.inc("snapshots_to_made_up_total", self.metrics.total("snapshots_sent_total") - snapshots)

        def reply(data: bytes | None, why: str) -> None:
            if life != self.life or a.token not in self._sess().in_flight:
                return  # timed out already, or we restarted
            if data is None:
                self.dispatch(self._sess().exchange_done(a.token, self.world.now(), error=why))
                return
            self.worker.submit(lambda: self._response_job(a, data, t0))

        def send() -> None:
            j = self.world.book.index_of(a.address)
            if j is None:
                self._timeout(lambda: reply(None, "connect timeout"), self._sess().cfg.connect_timeout_s)
                return
            self.world.links.send(self.index, j, len(body) + HTTP_OVERHEAD,
                                lambda: self.world.book.host(j).serve_exchange(self.index, body, reply))
            self._timeout(lambda: self.dispatch(self._sess().exchange_done(a.token, self.world.now(), error="timeout")),
                          self._sess().cfg.exchange_deadline_s(self._node().snapshot_bytes))

        return self.world.cost.build(len(body)), send

    def _response_job(self, a: Exchange, data: bytes, t0: float) -> tuple[float, Callable[[], None] | None]:
        node = self._node()
        try:
            result = node.handle_response(data, self.world.clock())
        except FrameRefused as exc:
            self.metrics.inc("frames_refused_total", reason=exc.reason.value)
            err = f"refused: {exc.reason.value}"
            return self.world.cost.ingest(len(data), 0, node.numel), lambda: self.dispatch(
                self._sess().exchange_done(a.token, self.world.now(), error=err))
        cost = self.world.cost.ingest(len(data), result.frames_in - 1 - result.refused, node.numel * self._vectors())
        carried, owed = self._answer_news(result)
        return cost, lambda: self.dispatch(self._sess().exchange_done(
            a.token, self.world.now(), peer_id=result.sender.hex(), rtt=self.world.now() - t0,
            carried=carried, owed=owed, step=result.step))

    def _answer_news(self, result: ExchangeResult) -> tuple[int | None, bool]:
        """What the session is told an answer brought (`Session.exchange_done`'s carried, owed)."""
        return result.news, result.owed

    def _forget_job(self, key: bytes) -> tuple[float, Callable[[], None] | None]:
        self._node().forget(key)
        return 0.0, None

    def _adopt_job(self, a: Adopt) -> tuple[float, Callable[[], None] | None]:
        x = self._fetched.take(a.token)
        assert self.trainer is not None
        self.trainer.adopt(x, a.step)
        self._node().adopt(x, a.step)
        if (host := self.world.book.host_at(a.address)) is not None and host.attacker:  # what joining must never do
            self.metrics.inc("adopted_from_attacker_total")
        return self.world.cost.op_s, None

    def _join_done_job(self) -> tuple[float, Callable[[], None] | None]:
        self._fetched.clear()

        def done() -> None:  # the node holds the adopted state: exchanges now carry it
            self.dispatch(self._sess().joined(self.world.now()))
            self._begin_training()

        return 0.0, done

    def _request(self, address: str, token: int, kind: str, on_reply: Callable[[int, bytes | None, str], None]) -> None:
        """GET /v1/hello or /v1/state: a small request, the server's answer over the reverse link."""
        life = self.life

        def reply(data: bytes | None, why: str) -> None:
            if life == self.life and self.session is not None:
                on_reply(token, data, why)

        j = self.world.book.index_of(address)
        if j is None:
            self._timeout(lambda: reply(None, "connect timeout"), self._sess().cfg.connect_timeout_s)
            return
        server = self.world.book.host(j)
        if kind == "hello":
            nonce = f"{self.nonces.getrandbits(128):032x}"
            self._nonce[token] = nonce
            self.world.links.send(self.index, j, HTTP_OVERHEAD, lambda: server.serve_hello(self.index, reply, nonce))
            self._timeout(lambda: reply(None, "timeout"))
        else:
            self.world.links.send(self.index, j, HTTP_OVERHEAD, lambda: server.serve_state(self.index, reply))
            self._timeout(lambda: reply(None, "timeout"), self._sess().cfg.transfer_deadline_s(self._node().snapshot_bytes))

    def _hello_reply(self, token: int, data: bytes | None, why: str) -> None:
        if data is None:
            self._nonce.pop(token, None)
            self.dispatch(self._sess().hello_done(token, self.world.now(), error=why))
            return
        try:
            hello = read_hello(data, self._node().policy, self.world.clock(), self._nonce.pop(token, ""))
        except FrameRefused as exc:
            self.dispatch(self._sess().hello_done(token, self.world.now(), error=f"refused: {exc.reason.value}"))
            return
        self.dispatch(self._sess().hello_done(token, self.world.now(), hello=hello))

    def _state_reply(self, token: int, data: bytes | None, why: str) -> None:
        if data is None:
            self.dispatch(self._sess().state_done(token, self.world.now(), error=why))
            return

        def job() -> tuple[float, Callable[[], None] | None]:
            node = self._node()
            cost = self.world.cost.ingest(len(data), 1, node.numel)
            try:
                x, step = node.read_state(data, self.world.clock())
            except FrameRefused as exc:
                err = f"refused: {exc.reason.value}"
                return cost, lambda: self.dispatch(self._sess().state_done(token, self.world.now(), error=err))
            probe = self._judge()
            better = probe(x) if probe is not None else None
            return cost, lambda: self.dispatch(self._fetched.judged(
                token, x, self._sess().state_done(token, self.world.now(), step=step, better=better)))

        self.worker.submit(job)

    def _timeout(self, fire: Callable[[], None], after_s: float | None = None) -> None:
        """`fire` after the request timeout (or `after_s`: a transfer's deadline, or the connect timeout
        where nothing listens)."""
        life, after_s = self.life, self._sess().cfg.request_timeout_s if after_s is None else after_s
        self.world.sched.after(after_s, lambda: fire() if life == self.life else None)

    # ------------------------------------------------------------------ observation
    def verified_addresses(self) -> list[str]:
        """Live neighbour-table entries that answered us at least once (what peer exchange found)."""
        if self.session is None:
            return []
        return [p.address for p in self.session.table.verified()]

    def verified_neighbours(self) -> int:
        return len(self.verified_addresses())

    def honest_params(self) -> torch.Tensor | None:
        """The parameters this peer trains with (an attacker's honest ones are not used)."""
        if not self.online or self.trainer is None:
            return None
        return self.trainer.get_flat_params()

    # ------------------------------------------------------------------ what attackers and control arms change
    def _make_node(self, *args: Any, **kwargs: Any) -> GossipNode:
        """The node this peer runs: the production one."""
        return GossipNode(*args, **kwargs)

    def _judge(self) -> Callable[[torch.Tensor], bool | None] | None:
        """How a joiner judges an offered state: as the real driver, by the trainer's verdict on its probe batch."""
        assert self.trainer is not None
        return self.trainer.probe_better if self.trainer.capabilities.probe else None
