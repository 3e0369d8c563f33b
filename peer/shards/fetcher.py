"""The shard fetcher: keeps the store filled with the shards of the manifest this peer lacks.

One planning thread asks neighbours what they hold (`GET /v1/shards`, every
`advert_every_s`, up to ADVERT_WORKERS at once), decides with `peer.shards.plan` which shards to fetch and from whom, and
hands each fetch to one of `max_fetches` download threads. A download tries the shard's
holders in turn, resuming with a Range request where the last one stopped; once the part
file holds the manifest's size it is hashed, and only bytes that match go into the store.
Bytes that do not are deleted and every source that contributed is banned (`ban_s`) and
counted. Nothing here blocks training: the trainer reads what the store lists.

`addresses` is a callable giving the addresses to ask (the bootstrap peers while the
peer starts, then its live verified neighbours); it may be replaced while running.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from peer.metrics import Metrics
from peer.shards.config import SwarmDataConfig
from peer.shards.download import SourceFailed, SourceLied, fetch_range, read_advert
from peer.shards.plan import FetchJob, Penalties, adverts_due, fetch_order, needs_shards, plan_round
from peer.shards.store import ShardStore, sha256_of
from peer.shards.ticker import Ticker

log = logging.getLogger(__name__)
TICK_S = 0.5
ADVERT_STALL_S = 5.0
ADVERT_WORKERS = 8
"""Neighbours asked for their adverts at once, so that silent ones do not hold up the rest."""


class ShardFetcher:
    def __init__(self, store: ShardStore, cfg: SwarmDataConfig, peer_id: str, addresses: Callable[[], list[str]],
                 metrics: Metrics, self_address: Callable[[], str] = lambda: "") -> None:
        self.store, self.cfg, self.peer_id, self.metrics = store, cfg, peer_id, metrics
        self.addresses = addresses
        self.self_address = self_address
        self.manifest_order = [s.sha256 for s in store.manifest.shards]
        self.order = fetch_order(self.manifest_order, peer_id)
        self.penalties = Penalties(cfg.ban_s)
        self.holders: dict[str, set[str]] = {}  # address -> shards it advertised
        self._asked: dict[str, float] = {}  # address -> when we last read its advert
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(cfg.max_fetches, thread_name_prefix="shard-fetch")
        self._advert_pool = ThreadPoolExecutor(ADVERT_WORKERS, thread_name_prefix="shard-advert")
        self._ticker = Ticker("shard-plan", TICK_S, lambda: self.step(time.monotonic()), stop=self._stop)
        self.changed = threading.Event()
        """Set whenever a shard is added (the start-up wait watches it)."""
        self._gauge()

    def ask_from(self, addresses: Callable[[], list[str]], self_address: Callable[[], str]) -> None:
        """From the next round on, ask `addresses` for adverts (a running peer's verified
        neighbours) and never `self_address()`, our own."""
        self.addresses, self.self_address = addresses, self_address

    def start(self) -> None:
        self._ticker.start()

    def close(self) -> None:
        self._ticker.close()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._advert_pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ planning
    def step(self, now: float) -> list[FetchJob]:
        """One round: refresh adverts that are due, then start the fetches the plan picks. A peer
        that holds the whole corpus asks nobody (adverts of a large corpus run to megabytes)."""
        self._gauge()
        if not needs_shards(self.order, self.store.held()):
            return []
        self._refresh_adverts(now)
        with self._lock:
            busy = set(self._busy)
            banned = self.penalties.banned(now)
        jobs = plan_round(self.order, self.store.held(), busy, self.holders, banned, self.cfg.max_fetches,
                          self.peer_id, self.store.evicted_at())
        started = []
        for job in jobs:
            if not self.store.reserve(job.shard):
                break  # the cache is full of shards too young or in use to evict
            with self._lock:
                self._busy.add(job.shard)
            self._pool.submit(self._fetch, job)
            started.append(job)
        return started

    def _refresh_adverts(self, now: float) -> None:
        due, gone = adverts_due(self.addresses(), self.self_address(), self._asked, now, self.cfg.advert_every_s)
        for address in gone:
            self.holders.pop(address, None)
            del self._asked[address]
        for address in due:
            self._asked[address] = now
        for address, shards in self._advert_pool.map(self._advert, due):  # a silent one holds up one worker
            if shards is None:
                self.holders.pop(address, None)
            else:
                self.holders[address] = shards

    def _advert(self, address: str) -> tuple[str, set[str] | None]:
        if self._stop.is_set():
            return address, None
        try:
            return address, read_advert(address, self.store.manifest.hash, self.manifest_order, ADVERT_STALL_S, self._stop)
        except SourceFailed as exc:
            log.debug("no shard advert from %s: %s", address, exc)
            return address, None

    # ------------------------------------------------------------------ one shard
    def _fetch(self, job: FetchJob) -> None:
        entry = self.store.entry(job.shard)
        assert entry is not None
        part = self.store.part_path(job.shard)
        deadline = time.monotonic() + self.cfg.shard_deadline_s
        contributors: set[str] = set()
        from_scratch = not part.exists()
        added = False
        try:
            for address in job.sources:
                def counted(n: int, address: str = address) -> None:
                    contributors.add(address)
                    self.metrics.inc("data_bytes_received_total", n)

                try:
                    fetch_range(address, job.shard, part, entry.size, self.cfg.stall_timeout_s, deadline, self._stop, counted)
                except SourceLied as exc:  # caught in the act: only this source is to blame
                    self._refuse(job, exc.reason, str(exc), {address}, part)
                    return
                except SourceFailed as exc:
                    self.metrics.inc("shard_source_failures_total", reason=exc.reason)
                    log.info("shard %s: %s; resuming from the next holder", entry.name, exc)
                    if exc.reason in ("deadline", "stopped"):
                        return
                    continue
                if sha256_of(part) != job.shard:
                    # Blame only a source that sent every byte: a mix of several (or of an earlier
                    # attempt) cannot tell the liar from the honest; it is fetched whole next time.
                    blamed = contributors if from_scratch and len(contributors) == 1 else set()
                    self._refuse(job, "hash_mismatch", f"bytes of {entry.name} from {sorted(contributors)} do not match "
                                 "the manifest's SHA-256", blamed, part)
                    return
                self.store.add(job.shard)
                added = True
                self.metrics.inc("shards_fetched_total")
                log.info("fetched shard %s (%d bytes) from %s", entry.name, entry.size, ", ".join(sorted(contributors)))
                self.changed.set()
                return
        except Exception:  # a full disk, a bug: this shard waits for a later round, fetching goes on
            log.exception("fetching shard %s failed", entry.name)
        finally:
            if not added:
                self.store.release(job.shard)
            with self._lock:
                self._busy.discard(job.shard)
            self._gauge()

    def _refuse(self, job: FetchJob, reason: str, detail: str, sources: set[str], part: Path) -> None:
        now = time.monotonic()
        with self._lock:  # the planning thread reads the bans
            for source in sources:
                self.penalties.penalise(source, now)
        part.unlink(missing_ok=True)
        self.metrics.inc("shards_refused_total", reason=reason)
        log.warning("refused shard %s: %s; banned for %g s: %s", job.shard[:16], detail, self.cfg.ban_s,
                    ", ".join(sorted(sources)) or "nobody (several sources)")

    def _gauge(self) -> None:
        held = self.store.held()
        self.metrics.set("data_shards_held", len(held))
        self.metrics.set("data_shards_in_manifest", len(self.order))
