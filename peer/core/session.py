"""Every decision a peer makes about the network, as a sans-IO state machine.

`Session` is fed events, each with an explicit `now` (seconds on a monotonic clock of the
driver's choosing), and returns `peer.core.actions` for the driver to perform. It holds
no sockets, tasks, threads or clocks, so the asyncio/aiohttp driver of a real peer and
simnet's virtual-clock driver run the very same decisions, and a unit test can script
them. The shape follows h11 (`Connection.send(event) -> bytes`) and python-zeroconf
(decide in pure code, then the caller sends). Owned by one thread: the driver's.

Decisions made here: when to publish and with whom to exchange (a sticky set of verified
partners, slots, stalls and busy partners resting: `peer.core.exchanges`); when to say hello (a
jittered cadence; each hello is also peer exchange) and which heard-of addresses to verify by
dialling them; when a peer is dead and evicted; when a dead `--peer` address is dialled again
(exponential backoff); how to join a running swarm (`peer.core.join`: ask every known peer for
its step, fetch the state of the furthest along, fall back to the next one; adopted here only
when further along than ours and not scored worse); what a failed publish means (logged,
counted, survived). See docs/architecture.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from peer.core.actions import Action, Adopt, Count, Exchange, FetchState, Forget, JoinDone, Log, Publish, SendHello
from peer.core.addresses import PeerInfo
from peer.core.candidates import next_deadline, overdue, room_for
from peer.core.config import SessionConfig
from peer.core.exchanges import Exchanges
from peer.core.hello import Hello
from peer.core.join import Join
from peer.core.table import NeighbourConfig, NeighbourTable

REPLACED = {"barren": Count("partners_barren_total"), "frozen": Count("partners_frozen_total")}
"""What the session counts when a partner is replaced for giving nothing (`Exchanges.finish`)."""


@dataclass
class _Retry:
    next_at: float
    wait: float


class Session:
    """See the module docstring. Public attributes are read-only for drivers."""

    def __init__(self, cfg: SessionConfig, *, peer_id: str, rng: random.Random) -> None:
        self.cfg = cfg
        self.candidates = cfg.candidates
        """How unverified candidates share their slots (`peer.core.candidates`)."""
        self.peer_id = peer_id
        self.rng = rng
        self.table = NeighbourTable(NeighbourConfig.of(cfg, self_peer_id=peer_id))
        self.listen = ""
        self.step = 0
        self.exchanges = Exchanges(cfg, self.table.cfg.rtt_smoothing)
        self._requests: dict[int, tuple[str, str]] = {}  # hello/state token -> (kind, address)
        self._dialling: dict[str, float] = {}  # address -> when we last dialled it to verify it
        self._retry: dict[str, _Retry] = {}  # dead bootstrap address -> when to dial it again
        self._unreachable: dict[str, str] = {}  # `--peer` address -> why its last hello failed
        self._token = self._hello_seq = 0
        self._next_hello = self._next_evict = 0.0
        self._join: Join | None = None
        self._adopted = False  # a state adopted, and no pull since (`joined`)

    # ------------------------------------------------------------------ queries
    @property
    def in_flight(self) -> dict[int, str]:
        """Our exchanges in flight, token -> address (read-only for drivers)."""
        return self.exchanges.in_flight

    @property
    def partners(self) -> list[str]:
        return self.exchanges.partners

    def stalled(self, now: float) -> list[int]:
        return self.exchanges.stalled(now)

    @property
    def accepting(self) -> bool:
        """Whether inbound exchanges are served (not while joining: our state is about to change)."""
        return self._join is None or self._join.done

    def verified_keys(self) -> frozenset[bytes]:
        """Keys whose listen address answered us signed by that key (a hello over our nonce, or an
        exchange we started): the only askers an answer may carry our snapshot to (`GossipNode`)."""
        return frozenset(bytes.fromhex(p.peer_id) for p in self.table.verified() if p.peer_id)

    def next_hello_seq(self) -> int:
        """Sequence number for our next signed hello (strictly increasing, across restarts too)."""
        self._hello_seq += 1
        return self._hello_seq

    def hello_sample(self) -> list[PeerInfo]:
        """Peers to name in our hello: only ones that answered us (one bad address is not spread)."""
        return self.table.sample_for_exchange(self.rng, self.cfg.hello_sample)

    def next_deadline(self) -> float:
        """When `tick` next has something to do."""
        times = [self._next_hello, self._next_evict, next_deadline(self._dialling, self._unverified(), self.candidates)]
        # a retry of an address still being dialled cannot go out before that dial ends (and the
        # session hears of it then): counted here, it would be a deadline in the past, forever
        times += [r.next_at for address, r in self._retry.items() if address not in self._dialling]
        if self._join is not None and self._join.waiting:
            times.append(self._join.deadline())
        return min(times)

    # ------------------------------------------------------------------ events
    def start(self, now: float, *, listen: str, bootstrap: list[str], step: int, hello_seq_base: int) -> list[Action]:
        """Our server is up at `listen`; `bootstrap` are the `--peer` addresses."""
        self.listen, self.step = listen, step
        self._hello_seq = hello_seq_base
        self.table = NeighbourTable(NeighbourConfig.of(self.cfg, self.peer_id, (listen,) if listen else ()))
        self._next_hello = now + self._hello_wait()
        self._next_evict = now + self.cfg.evict_every_s
        out: list[Action] = []
        for address in dict.fromkeys(bootstrap):
            out += self.found(PeerInfo(peer_id="", address=address, source="static"), now)
        if self.cfg.join:  # after every bootstrap address is known, so that all of them are asked
            self._join = Join(self.cfg, now)
            out += self._join_progress(now)
        return out

    def found(self, info: PeerInfo, now: float) -> list[Action]:
        """A discovery source (mDNS, `--peer`, a neighbour's hello) named a peer."""
        if info.address == self.listen or info.peer_id == self.peer_id:
            return []
        out: list[Action] = []
        if info.source != "static" and info.address not in self.table and not self._room_for_candidate(info):
            return [Count("candidates_refused_total")]
        if self.table.add(info, now):
            via = "--peer (not yet contacted)" if info.source == "static" else info.source
            out.append(Log(f"found peer {info.address} via {via}"))
        out += self._verify(now)
        if self._join is not None and self._join.waiting:
            out += self._join_progress(now)
        return out

    def inbound_exchange(self, listen: str, peer_id: str, now: float, *, carried: int = 0) -> list[Action]:
        """A peer exchanged with us and says it listens at `listen`: a candidate until we dial it.
        `carried`: the frames of its request that changed our copy of it (`ExchangeResult.news`);
        news from the key verified at `listen` lets a partner replaced for giving nothing back in,
        and is pulled at once by a peer with no partner (a joiner's first push): our next publish
        may be minutes away at a long publish period."""
        if not listen:
            return []
        try:
            info = PeerInfo(peer_id=peer_id, address=listen, source="exchange")
        except ValueError:
            return [Count("inbound_bad_listen_total")]
        out = self.found(info, now)
        known = self.table.get(listen)
        news_from_it = carried > 0 and known is not None and known.peer_id == peer_id
        if news_from_it and self.exchanges.reinstate(listen):
            out += [Count("partners_reinstated_total"), Log(f"partner {listen} brought news: it may be a partner again")]
        h = self.table.health(listen)
        if news_from_it and not self.exchanges.partners and h is not None and h.last_success is not None:
            out += self._pull(now)
        if h is not None and h.dead and listen not in self._dialling:
            # Judged dead, and speaking again (a restart): verified anew now, not at the next retry,
            # since until then our answers carry it no snapshot (`peer.core.snapshots`).
            out.append(self._hello(listen, now))
        return out

    def step_boundary(self, step: int, publish_due: bool, now: float) -> list[Action]:
        """The training thread finished `step`; when a publish is due, publish and start up to
        `pulls_per_publish` exchanges, each with another partner."""
        self.step = step
        if not publish_due:
            return []
        self.exchanges.published()
        return [Publish()] + self._pull(now)

    def joined(self, now: float) -> list[Action]:
        """The join ended and the state it adopted, if any, is in place (drivers call this once
        `JoinDone` is performed). Having adopted one, pull at once instead of a training step
        later: the source's outbox still holds the updates since the state it served, which our
        copy of it was seeded from (`peer.core.state_seed`), and our snapshot reaches it sooner."""
        if not self._adopted:
            return []
        self._adopted = False
        return self._pull(now)

    def publish_done(self, step: int, now: float, error: str | None = None) -> list[Action]:
        """The node published (or refused to: e.g. non-finite parameters). A failure is survived."""
        if error is None:
            return []
        return [Count("publish_failures_total"), Log(f"could not publish an update at step {step}: {error}", "error")]

    def exchange_done(self, token: int, now: float, *, peer_id: str = "", rtt: float | None = None,
                      error: str | None = None, carried: int | None = None, owed: bool = True,
                      step: int | None = None, busy_s: float | None = None) -> list[Action]:
        """An exchange we started ended: `error` is None on a verified reply; `carried`: how many of
        its frames changed our copy of the partner (None: not told), `owed`: whether the partner had
        published past the copy we held, `step`: the step it claims (`ExchangeResult.news`, `.owed`,
        `.step`; `Exchanges.finish`). `busy_s`: it answered busy, to be asked again that much later
        (`Exchanges.rest`): not a failure of the partner."""
        if error is not None and busy_s is not None:
            address = self.exchanges.rest(token, now + busy_s)
            return [Count("exchanges_busy_total")] if address is not None else []
        address, replaced = self.exchanges.finish(token, error is not None, rtt, carried, owed, step)
        if address is None:
            return []
        if error is not None:
            return (self._failed(address, now, f"exchange with {address} failed: {error}", "exchange_failures_total")
                    + self._probe(address, now))
        self.table.mark_success(address, now, peer_id=peer_id or None, rtt=rtt)
        return [Count("exchanges_ok_total")] + ([REPLACED[replaced]] if replaced else [])

    def hello_done(self, token: int, now: float, hello: Hello | None = None, error: str | None = None) -> list[Action]:
        """A hello we asked for arrived verified (`hello`), or failed (`error`)."""
        kind, address = self._requests.pop(token, ("", ""))
        if kind != "hello":
            return []
        self._dialling.pop(address, None)
        out: list[Action] = []
        if hello is not None and hello.listen and hello.listen != address:
            # Signed by a peer that listens elsewhere: a relay, or an address it does not advertise.
            # Bind nothing to this address; the advertised one is a candidate to dial.
            out += self._failed(address, now, f"hello from {address} was signed for {hello.listen}",
                                "hello_listen_mismatch_total")
            try:
                out += self.found(PeerInfo(peer_id=hello.peer_id, address=hello.listen, source="exchange"), now)
            except ValueError:
                out.append(Count("hello_bad_listen_total"))
            hello = None
        elif hello is None:
            out += self._failed(address, now, f"hello to {address} failed: {error}", "hello_failures_total")
            out += self._bootstrap_failed(address, str(error))
            out += self._probe(address, now)
        elif self.table.mark_success(address, now, peer_id=hello.peer_id):
            self._retry.pop(address, None)
            self._unreachable.pop(address, None)
            for info in hello.peers:
                out += self.found(info, now)
        if self._join is not None and self._join.hello_ended(token, address, hello.step if hello else None):
            out += self._join_progress(now)
        return out

    def state_done(self, token: int, now: float, step: int | None = None, error: str | None = None,
                   better: bool | None = None) -> list[Action]:
        """The state fetched under `token` verified (its claimed `step`), or failed.

        `better` is the trainer's verdict on a probe batch (None: it cannot judge). A claimed
        step buys nothing: a state that scores worse than ours is refused whatever it claims.
        """
        kind, address = self._requests.pop(token, ("", ""))
        if kind != "state" or self._join is None or not self._join.fetch_ended(token, error):
            return []
        if better is False:
            return [Count("joins_refused_total"), Log(f"not joining from {address}: its state scores worse than ours "
                                                      f"on our probe batch (it claims step {step})", "warning")
                    ] + self._join_progress(now)
        if error is None and step is not None and step > self.step:
            counted = max(self.step, self._join.counted_step(step))
            self._join.adopted()
            self.step, self._adopted = counted, True
            return [Adopt(token, address, counted), JoinDone(address), Count("joins_total"),
                    Log(f"joined: adopted the state of {address} (its step {step}), counting on from step {counted}")]
        why = error if error is not None else f"its step {step} is not ahead of ours ({self.step})"
        return [Log(f"could not join from {address}: {why}")] + self._join_progress(now)

    def tick(self, now: float) -> list[Action]:
        """Timers: eviction, hello cadence, bootstrap retries, the join deadline."""
        out: list[Action] = []
        if now >= self._next_evict:
            self._next_evict = now + self.cfg.evict_every_s
            for info in self.table.evict_dead(now):
                out += [Count("evictions_total"), Log(f"evicted peer {info.address} (unreachable)"),
                        *([Forget(info.peer_id, info.address)] if info.peer_id else [])]  # no key: nothing held
            self._schedule_retries(now)
        if now >= self._next_hello:
            self._next_hello = now + self._hello_wait()
            live = [p for p in self.table.live() if p.address not in self._dialling]
            if live:
                out.append(self._hello(self.rng.choice(live).address, now))
        for address, retry in list(self._retry.items()):
            if now >= retry.next_at and address not in self._dialling:
                retry.wait = min(2 * retry.wait, self.cfg.bootstrap_retry_max_s)
                retry.next_at = now + retry.wait
                out += [Count("bootstrap_retries_total"), self._hello(address, now)]
        out += self._drop_overdue(now) + self._verify(now)
        if self._join is not None and self._join.waiting:
            out += self._join_progress(now)
        return out

    # ------------------------------------------------------------------ internals
    def _pull(self, now: float) -> list[Action]:
        """Up to `pulls_per_publish` exchanges, each with another partner."""
        out: list[Action] = []
        while len(out) < self.cfg.pulls and self.exchanges.slot_free(now) and self.accepting:
            address = self.exchanges.choose(self.table, self.rng, now)
            if address is None:
                break
            out.append(self._exchange(address, now))
        return out

    def _exchange(self, address: str, now: float) -> Exchange:
        info = self.table.get(address)
        token = self._new_token()
        self.exchanges.start(token, address, now)
        return Exchange(token, address, info.peer_id if info else "")

    def _new_token(self) -> int:
        self._token += 1
        return self._token

    def _hello_wait(self) -> float:
        return self.cfg.hello_every_s * (0.5 + self.rng.random())

    def _hello(self, address: str, now: float) -> SendHello:
        token = self._new_token()
        self._requests[token] = ("hello", address)
        self._dialling[address] = now
        return SendHello(token, address)

    def _failed(self, address: str, now: float, message: str, counter: str) -> list[Action]:
        self.table.mark_failure(address, now)
        return [Count(counter), Log(message, "debug")]

    def _bootstrap_failed(self, address: str, error: str) -> list[Action]:
        """A `--peer` address the user typed did not answer: say so once, naming the reason,
        since a typo'd port otherwise looks like a swarm that is merely quiet."""
        h = self.table.health(address)
        if h is None or not h.static or address in self._unreachable:
            return []
        self._unreachable[address] = error
        return [Log(f"cannot reach --peer {address}: {error}; check that a gossip-tts peer runs there "
                    "and its port is open (retrying with backoff)", "warning")]

    def _probe(self, address: str, now: float) -> list[Action]:
        """Say hello again to a verified peer that just failed us: no longer a partner, it would
        otherwise linger (its neighbour copy held) until the silence timeout; a dead one is gone
        after `max_failures` probes, and one that answers is healthy again."""
        h = self.table.health(address)
        if h is None or h.dead or h.static or h.last_success is None or address in self._dialling:
            return []
        return [self._hello(address, now)]

    def _unverified(self) -> list[str]:
        return [p.address for p in self.table.live()
                if (h := self.table.health(p.address)) is not None and h.last_success is None and not h.static]

    def _room_for_candidate(self, info: PeerInfo) -> bool:
        """A candidate slot is free for `info` (`peer.core.candidates.room_for`), and (when the table is
        full) a candidate, not a verified peer, would go."""
        unverified = self._unverified()
        return room_for(info, unverified, self.cfg.max_candidates, self.candidates) and (
            len(self.table) < self.cfg.max_peers or bool(unverified))

    def _drop_overdue(self, now: float) -> list[Action]:
        """Candidates whose dial is past `CandidateConfig.dial_deadline_s`: the hello failed, and the
        candidate leaves the table (heard of again, it may come back), so claims that never answer
        hold a slot for seconds, not for three request timeouts."""
        out: list[Action] = []
        for address in overdue(self._dialling, self._unverified(), now, self.candidates):
            token = next((t for t, (kind, a) in self._requests.items() if kind == "hello" and a == address), 0)
            out += self.hello_done(token, now, error=f"no answer within {self.candidates.dial_deadline_s:g} s")
            self._dialling.pop(address, None)
            self.table.remove(address)
        return out

    def _verify(self, now: float) -> list[Action]:
        """Dial heard-of peers that never answered us, at most once per hello period each."""
        out: list[Action] = []
        for info in self.table.live():
            health = self.table.health(info.address)
            if health is None or health.last_success is not None or info.address in self._dialling:
                continue
            out.append(self._hello(info.address, now))
        return out

    def _schedule_retries(self, now: float) -> None:
        for info in self.table.static_peers():
            health = self.table.health(info.address)
            if health is not None and health.dead:
                self._retry.setdefault(info.address, _Retry(now + self.cfg.bootstrap_retry_min_s,
                                                            self.cfg.bootstrap_retry_min_s))
            else:
                self._retry.pop(info.address, None)

    def _join_progress(self, now: float) -> list[Action]:
        assert self._join is not None
        # Bootstrap peers count even when dead: they are who the user told us to join.
        known = list({p.address: p for p in self.table.live() + self.table.static_peers()})
        pending = {address: token for token, (kind, address) in self._requests.items() if kind == "hello"}
        out = self._join.progress(now, step=self.step, known=known, pending=pending, unreachable=self._unreachable,
                                  hello=lambda address: self._hello(address, now), fetch=self._fetch_state)
        # A first contact with the peer whose state we fetch, meanwhile: its answer brings the
        # ticket our first exchange after adopting spends (so that one carries frames), and it
        # verifies us by then. A fresh process holds no ticket of anyone's, so this request is a
        # control frame alone (`GossipNode.build_request`): nothing of the state we are replacing.
        return out + [self._exchange(a.address, now) for a in out if isinstance(a, FetchState)
                      and a.address not in self.exchanges.in_flight.values() and self.exchanges.slot_free(now)]

    def _fetch_state(self, address: str) -> FetchState:
        token = self._new_token()
        self._requests[token] = ("state", address)
        return FetchState(token, address)
