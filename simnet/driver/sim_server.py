"""The server half of a simulated peer: what it answers to /v1/exchange, /v1/hello and /v1/state.

Kept apart from the client half (`simnet.driver.sim_peer.SimPeer`, which inherits this) because it
is the one place that decides how a simulated peer looks to others: a crashed host is silent,
one that left refuses connections, a joining one answers 503, and node work is charged to
its `SimWorker` as the real server queues it on the node worker.
"""

from __future__ import annotations

from typing import Callable

from peer.core import Action, GossipNode, Session, make_hello
from peer.metrics import Metrics
from protocol import FrameRefused, Identity
from simnet.driver.sim_worker import SimWorker
from simnet.world.sim_world import Reply, SimWorld

HTTP_OVERHEAD = 300
"""Bytes of HTTP request/response headers around every body."""


class SimServer:
    """The serving half of `SimPeer`: what it needs of the peer is declared here."""

    world: SimWorld
    index: int
    address: str
    identity: Identity
    online: bool
    departure: str
    """"crash" | "leave" while offline."""
    metrics: Metrics
    worker: SimWorker

    @property
    def public_key(self) -> bytes:
        """The key this peer signs with (public: its hellos name it)."""
        return self.identity.public_key

    def _sess(self) -> Session:
        raise NotImplementedError

    def _node(self) -> GossipNode:
        raise NotImplementedError

    def _vectors(self) -> int:
        """Parameter-sized vectors an update or snapshot frame carries: the delta or copy, and our
        steps (a snapshot: their sum) when we share them."""
        return 2 if self._node().partner_steps.enabled else 1

    def dispatch(self, actions: list[Action]) -> None:
        raise NotImplementedError

    def _hello_step(self, step: int) -> int:
        """The step our hellos claim: the session's (a join liar claims more)."""
        return step

    def _inbound(self, session: Session, listen: str, peer_id: str, now: float, carried: int = 0) -> list[Action]:
        """The session's answer to an inbound exchange naming `listen` (a candidate to dial) that
        changed our copy of its sender by `carried` frames."""
        return session.inbound_exchange(listen, peer_id, now, carried=carried)

    def _refuse_offline(self, src: int, reply: Reply) -> bool:
        if self.online:
            return False
        if self.departure == "leave":  # connection refused: the requester learns within one trip back
            self.world.sched.after(self.world.links.latency(self.index, src), lambda: reply(None, "connection refused"))
        return True  # a crashed host is silent: the requester times out

    def _answer(self, src: int, data: bytes | None, why: str, reply: Reply) -> None:
        size = HTTP_OVERHEAD + (len(data) if data is not None else 0)
        self.world.links.send(self.index, src, size, lambda: reply(data, why))

    def serve_exchange(self, src: int, body: bytes, reply: Reply) -> None:
        """POST /v1/exchange arrived from peer `src`."""
        if self._refuse_offline(src, reply):
            return
        if not self._sess().accepting:  # still joining: HTTP 503
            self.metrics.inc("exchanges_refused_joining_total")
            self._answer(src, None, "HTTP 503", reply)
            return

        address, verified = self.world.book.host(src).address.rpartition(":")[0], self._sess().verified_keys()

        def job() -> tuple[float, Callable[[], None] | None]:
            node = self._node()
            try:
                data, result = node.handle_request(body, self.world.clock(), address=address, verified=verified)
            except FrameRefused as exc:  # HTTP 400
                self.metrics.inc("frames_refused_total", reason=exc.reason.value)
                return self.world.cost.ingest(len(body), 0, node.numel), lambda: self._answer(src, None, "HTTP 400", reply)
            except ValueError:  # our own state cannot be encoded: HTTP 500
                return self.world.cost.op_s, lambda: self._answer(src, None, "HTTP 500", reply)
            cost = self.world.cost.ingest(len(body), result.frames_in - 1 - result.refused, node.numel * self._vectors())
            cost += self.world.cost.build(len(data))

            def then() -> None:
                self.dispatch(self._inbound(self._sess(), result.listen, result.sender.hex(), self.world.now(),
                                            result.news))
                self._answer(src, data, "", reply)

            return cost, then

        self.worker.submit(job)

    def serve_hello(self, src: int, reply: Reply, nonce: str) -> None:
        """GET /v1/hello: signed on the driver's thread, as the real driver does."""
        if self._refuse_offline(src, reply):
            return
        s, node = self._sess(), self._node()
        data = make_hello(self.identity, swarm=node.cfg.swarm, fingerprint=node.fingerprint, seq=s.next_hello_seq(),
                          step=self._hello_step(s.step), now=self.world.clock(), listen=self.address,
                          peers=s.hello_sample(), limits=node.limits, nonce=nonce)
        self._answer(src, data, "", reply)

    def serve_state(self, src: int, reply: Reply) -> None:
        """GET /v1/state: the signed snapshot of our last publish (built once per publish)."""
        if self._refuse_offline(src, reply):
            return

        def job() -> tuple[float, Callable[[], None] | None]:
            node = self._node()
            fresh = not node.state_cached
            data = node.state_frame(self.world.clock())
            return (self.world.cost.build(len(data)) if fresh else self.world.cost.op_s), lambda: self._answer(src, data, "", reply)

        self.worker.submit(job)

