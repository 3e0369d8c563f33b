"""One simulated peer's corpus: its store, its fetcher and its shard server, on the virtual clock.

The fetcher decides nothing itself: every round it asks `peer.shards.plan` which adverts are
due (`adverts_due`), reads them over the links (`GET /v1/shards`: the real bitmap body,
`peer.shards.advert`), and starts what `plan_round` picks, trying each job's sources in
order and resuming a cut-off transfer at the next one, as `peer.shards.fetcher.ShardFetcher`
does. Its round waits for the due adverts (each for at most ADVERT_STALL_S), then the next
round follows TICK_S later. Before the peer holds a shard it asks only its bootstrap
addresses; once its gossip peer runs, its live verified neighbours as well (`SwarmData.serve`).
The server answers adverts and downloads, turning away what `upload_refusal` refuses.
Shard bytes always match the manifest here (nobody lies), so no source is ever banned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from peer.shards.advert import advert_body, parse_advert
from peer.shards.fetcher import ADVERT_STALL_S, TICK_S
from peer.shards.plan import FetchJob, Penalties, adverts_due, fetch_order, needs_shards, plan_round, upload_refusal
from peer.shards.config import SwarmDataConfig
from protocol import Identity
from simnet.driver.shard_transfer import SegmentStream
from simnet.driver.sim_server import HTTP_OVERHEAD
from simnet.world.data_config import DataConfig
from simnet.world.sim_world import SimWorld


@dataclass(frozen=True)
class Corpus:
    """What every slot's fetcher and server share: the run's data settings and its manifest."""

    cfg: DataConfig
    fetch_cfg: SwarmDataConfig
    manifest_order: list[str]
    manifest_hash: str


class GossipSide(Protocol):
    """What a slot's corpus needs of the gossip peer in the same slot."""

    index: int
    identity: Identity
    address: str
    online: bool
    first_trained_at: float | None

    def verified_addresses(self) -> list[str]: ...


class Download:
    """One job under way: which source it is at, and the timers that cut it off."""

    def __init__(self, job: FetchJob, deadline: float) -> None:
        self.job, self.deadline = job, deadline
        self.source = -1
        self.attempt = 0
        self.stream: SegmentStream | None = None
        self.server: ShardPeer | None = None
        self.last_byte_at = 0.0


class ShardPeer:
    """One slot's store, fetcher and shard server; `directory` is every slot's, by index."""

    def __init__(self, corpus: Corpus, world: SimWorld, gossip: GossipSide, held: set[str],
                 directory: Sequence["ShardPeer"], on_shard: Callable[[int, bool], None]) -> None:
        self.corpus, self.world, self.gossip, self.directory, self._on_shard = corpus, world, gossip, directory, on_shard
        self.index, self.peer_id, self.address = gossip.index, gossip.identity.peer_id, gossip.address
        self.cfg = corpus.fetch_cfg
        self.held = set(held)
        self.order = fetch_order(corpus.manifest_order, self.peer_id) if corpus.cfg.plan == "swarm" else list(corpus.manifest_order)
        self.adverts: dict[str, set[str]] = {}  # address -> shards it advertised
        self.asked: dict[str, float] = {}
        self.busy: dict[str, Download] = {}
        self.part: dict[str, int] = {}  # shard -> bytes already received (the part file)
        self.penalties = Penalties(self.cfg.ban_s)
        self.first_shard_at: float | None = 0.0 if held else None
        self.complete_at: float | None = 0.0 if not needs_shards(self.order, self.held) else None
        self.uploads = 0
        self.open_to: dict[int, int] = {}
        self.bytes_sent = 0  # shard bytes this peer put on its uplink
        self.counts: dict[str, int] = {}

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    # ------------------------------------------------------------------ the fetcher's rounds
    def start(self) -> None:
        if needs_shards(self.order, self.held):
            self.world.sched.after(0.0, self._round)

    def addresses(self) -> list[str]:
        """Who the fetcher asks: the bootstrap addresses, and once the gossip peer runs its live
        verified neighbours too. The control asks its bootstrap address (the seed) alone."""
        boot = self.world.book.bootstrap_for(self.index)
        if self.corpus.cfg.plan != "swarm" or not self.gossip.online:
            return boot
        return self.gossip.verified_addresses() + boot

    def _round(self) -> None:
        if not needs_shards(self.order, self.held):
            return  # the real planning thread goes on ticking, asking nobody and starting nothing
        now = self.world.now()
        due, gone = adverts_due(self.addresses(), self.address, self.asked, now, self.cfg.advert_every_s)
        for address in gone:
            self.adverts.pop(address, None)
            del self.asked[address]
        for address in due:
            self.asked[address] = now
        waiting = {"n": len(due)}

        def answered() -> None:
            waiting["n"] -= 1
            if waiting["n"] == 0:
                self._plan()

        for address in due:
            self._read_advert(address, answered)
        if not due:
            self._plan()

    def _plan(self) -> None:
        now = self.world.now()
        jobs = plan_round(self.order, self.held, set(self.busy), self.adverts, self.penalties.banned(now),
                          self.cfg.max_fetches, self.peer_id, {})
        for job in jobs:
            d = Download(job, now + self.cfg.shard_deadline_s)
            self.busy[job.shard] = d
            self.world.sched.at(d.deadline, lambda d=d: self._deadline(d))
            self._next_source(d)
        self.world.sched.after(TICK_S, self._round)

    def _read_advert(self, address: str, answered: Callable[[], None]) -> None:
        state = {"open": True}

        def done(shards: set[str] | None) -> None:
            if not state["open"]:
                return
            state["open"] = False
            if shards is None:
                self.count("adverts_failed")
                self.adverts.pop(address, None)
            else:
                self.count("adverts_read")
                self.adverts[address] = shards
            answered()

        j = self.world.book.index_of(address)
        if j is None:
            self.world.sched.after(ADVERT_STALL_S, lambda: done(None))
            return
        server = self.directory[j]
        self.world.links.send(self.index, j, HTTP_OVERHEAD, lambda: server.serve_advert(self.index, done))
        self.world.sched.after(ADVERT_STALL_S, lambda: done(None))

    # ------------------------------------------------------------------ one shard
    def _next_source(self, d: Download) -> None:
        d.source += 1
        d.attempt += 1
        if d.source >= len(d.job.sources):
            self._end(d)  # every source failed: a later round tries again
            return
        address = d.job.sources[d.source]
        j = self.world.book.index_of(address)
        if j is None:
            self._failed(d, d.attempt, "unreachable")
            return
        attempt, server = d.attempt, self.directory[j]
        d.last_byte_at = self.world.now()
        self.world.links.send(self.index, j, HTTP_OVERHEAD,
                            lambda: server.serve_shard(self, d, attempt, self.part.get(d.job.shard, 0)))
        self._watch(d, attempt)

    def _watch(self, d: Download, attempt: int) -> None:
        """A source that sends no byte for stall_timeout_s is left for the next one."""
        def check() -> None:
            if self.busy.get(d.job.shard) is not d or d.attempt != attempt:
                return
            idle = self.world.now() - d.last_byte_at
            if idle >= self.cfg.stall_timeout_s:
                self._failed(d, attempt, "stall")
            else:
                self.world.sched.after(self.cfg.stall_timeout_s - idle, check)

        self.world.sched.after(self.cfg.stall_timeout_s, check)

    def _deadline(self, d: Download) -> None:
        if self.busy.get(d.job.shard) is d:
            self.count("source_failures_deadline")
            self._cut(d)
            self._end(d)

    def _failed(self, d: Download, attempt: int, reason: str) -> None:
        if self.busy.get(d.job.shard) is not d or d.attempt != attempt:
            return
        self.count(f"source_failures_{reason}")
        self._cut(d)
        self._next_source(d)

    def _cut(self, d: Download) -> None:
        if d.stream is not None and d.server is not None:
            d.stream.cancel()
            d.server.upload_ended(self.index)
        d.stream = d.server = None

    def _received(self, d: Download, attempt: int, n: int) -> None:
        if self.busy.get(d.job.shard) is not d or d.attempt != attempt:
            return
        d.last_byte_at = self.world.now()
        self.part[d.job.shard] = self.part.get(d.job.shard, 0) + n

    def _complete(self, d: Download, attempt: int) -> None:
        if self.busy.get(d.job.shard) is not d or d.attempt != attempt:
            return
        assert d.server is not None
        d.server.upload_ended(self.index)
        d.stream = d.server = None
        shard = d.job.shard
        self.part.pop(shard, None)
        self.held.add(shard)  # the bytes match the manifest: simulated holders never lie
        self.count("shards_fetched")
        self._end(d)
        now = self.world.now()
        first = self.first_shard_at is None
        if first:
            self.first_shard_at = now
        if not needs_shards(self.order, self.held):
            self.complete_at = now
        self._on_shard(self.index, first)

    def _end(self, d: Download) -> None:
        if self.busy.get(d.job.shard) is d:
            del self.busy[d.job.shard]

    # ------------------------------------------------------------------ the server half
    def serving(self) -> bool:
        """The shard routes answer once the peer's server is up (after its first shard)."""
        return self.gossip.online

    def _refused(self, src: int, fire: Callable[[], None]) -> None:
        """Nothing listens here: the asker learns after the trip back."""
        self.world.sched.after(self.world.links.latency(self.index, src), fire)

    def serve_advert(self, src: int, reply: Callable[[set[str] | None], None]) -> None:
        if not self.serving():
            self._refused(src, lambda: reply(None))
            return
        order, digest = self.corpus.manifest_order, self.corpus.manifest_hash
        body = json.dumps(advert_body(digest, order, self.held), separators=(",", ":"))
        self.world.links.send(self.index, src, HTTP_OVERHEAD + len(body),
                            lambda: reply(parse_advert(json.loads(body), digest, order)))

    def serve_shard(self, client: "ShardPeer", d: Download, attempt: int, offset: int) -> None:
        src = client.index
        if client.busy.get(d.job.shard) is not d or d.attempt != attempt:
            return  # the asker gave up on this source while the request travelled
        if not self.serving():
            self._refused(src, lambda: client._failed(d, attempt, "unreachable"))
            return
        if d.job.shard not in self.held:
            self.world.links.send(self.index, src, HTTP_OVERHEAD, lambda: client._failed(d, attempt, "http_404"))
            return
        refusal = upload_refusal(self.open_to.get(src, 0), self.uploads, self.cfg.max_uploads_per_address,
                                 self.cfg.max_uploads)
        if refusal is not None:
            self.count(f"uploads_refused_{refusal[0]}")
            self.world.links.send(self.index, src, HTTP_OVERHEAD, lambda: client._failed(d, attempt, f"http_{refusal[0]}"))
            return
        self.uploads += 1
        self.open_to[src] = self.open_to.get(src, 0) + 1
        self.count("shards_served")
        self.count("served_as_first_source" if d.source == 0 else "served_after_a_refusal")

        def sent(n: int) -> None:
            self.bytes_sent += n

        stream = SegmentStream(self.world.links, self.world.sched, self.index, src, offset, self.corpus.cfg.shard_bytes,
                               1024 * self.corpus.cfg.segment_kib, self.corpus.cfg.window,
                               on_bytes=lambda n: client._received(d, attempt, n),
                               on_done=lambda: client._complete(d, attempt), on_sent=sent)
        d.stream, d.server = stream, self
        self.world.links.send(self.index, src, HTTP_OVERHEAD, stream.begin)  # the response headers, then the body

    def upload_ended(self, src: int) -> None:
        self.uploads -= 1
        self.open_to[src] -= 1
        if not self.open_to[src]:
            del self.open_to[src]
