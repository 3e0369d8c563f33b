"""Pure decisions of the shard fetcher: which shards next, from whom, and which to evict.

No I/O and no clock: every function takes what it needs (`now` included), so each rule is
tested by scripting its inputs (tests/unit/peer/shards/test_plan.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def fetch_order(shard_hashes: list[str], peer_id: str) -> list[str]:
    """The order this peer fetches a corpus in: the shards sorted by hash, rotated to start at a
    place drawn from the peer id, so that each peer covers a different part first and the swarm
    as a whole holds every shard early. Deterministic: the same peer always starts at the same place."""
    ordered = sorted(shard_hashes)
    if not ordered:
        return []
    start = int.from_bytes(hashlib.sha256(b"shard-order:" + peer_id.encode()).digest()[:8], "big") % len(ordered)
    return ordered[start:] + ordered[:start]


def prefer_unread(order: list[str], evicted_at: dict[str, float]) -> list[str]:
    """`order` with the shards this peer never held first (in `order`), then those it evicted
    longest ago: a peer whose cache cannot hold the corpus moves through it instead of fetching
    back what it just dropped."""
    return sorted(order, key=lambda s: evicted_at.get(s, float("-inf")))


def source_order(sources: list[str], shard: str, peer_id: str) -> list[str]:
    """The holders of one shard in the order to try them: a per-(peer, shard) shuffle, so that the
    askers of one shard spread over its holders instead of all asking the first."""
    return sorted(sources, key=lambda a: hashlib.sha256(f"{peer_id}|{shard}|{a}".encode()).digest())


@dataclass(frozen=True)
class FetchJob:
    shard: str
    sources: tuple[str, ...]


def choose_fetches(order: list[str], held: set[str], busy: set[str], holders: dict[str, set[str]],
                   banned: set[str], slots: int, peer_id: str, room_for: int) -> list[FetchJob]:
    """Up to `slots` shards to fetch now (at most `room_for`, what the cache can take): shards not
    held, not being fetched (`busy`), advertised by a source that is not banned.

    A holder that advertises the whole corpus is most likely the seed everyone else asks too, so
    shards that some partial holder can give come first (in `order` within each group), and are
    fetched from partial holders only: when those are all busy (503) the job ends and a later
    round tries again, rather than fall back to the seed. A full holder is the source of what
    nobody else advertises, so the seed uploads little more than the corpus once
    (docs/simnet.md#figures-behind-the-codes-defaults)."""
    holdings: dict[str, int] = {}
    for shard_holders in holders.values():
        for address in shard_holders:
            holdings[address] = holdings.get(address, 0) + 1
    full, wanted = len(order), min(slots, room_for)
    candidates: list[tuple[bool, FetchJob]] = []
    partial = 0
    for shard in order:
        if partial >= wanted:
            break  # enough from partial holders: nothing later can come before them
        if shard in held or shard in busy:
            continue
        sources = [a for a in holders.get(shard, ()) if a not in banned]
        if sources:
            ordered = sorted(source_order(sources, shard, peer_id), key=lambda a: holdings[a] >= full)
            only_full = holdings[ordered[0]] >= full
            if not only_full:
                ordered = [a for a in ordered if holdings[a] < full]
            partial += not only_full
            candidates.append((only_full, FetchJob(shard, tuple(ordered))))
    candidates.sort(key=lambda c: c[0])  # stable: `order` within each group
    return [job for _, job in candidates[:wanted]]


def adverts_due(addresses: list[str], self_address: str, asked: dict[str, float], now: float,
                every_s: float) -> tuple[list[str], list[str]]:
    """(due, gone): the neighbours whose advert to read now (never asked, or last asked `every_s`
    ago or more; in the order given, each once, never ourselves), and those we asked before that
    are no longer among `addresses` (their adverts are forgotten: a peer that left serves nothing)."""
    live = [a for a in dict.fromkeys(addresses) if a and a != self_address]
    listed = set(live)
    gone = [a for a in asked if a not in listed]
    due = [a for a in live if now - asked.get(a, float("-inf")) >= every_s]
    return due, gone


def holders_by_shard(adverts: dict[str, set[str]]) -> dict[str, set[str]]:
    """shard -> the addresses advertising it, from address -> the shards it advertised."""
    by_shard: dict[str, set[str]] = {}
    for address, shards in adverts.items():
        for shard in shards:
            by_shard.setdefault(shard, set()).add(address)
    return by_shard


def needs_shards(order: list[str], held: set[str]) -> bool:
    """Whether a peer still lacks a shard of the corpus: one that holds it all asks nobody (the
    adverts of a large corpus run to megabytes)."""
    return not held >= set(order)


def plan_round(order: list[str], held: set[str], busy: set[str], adverts: dict[str, set[str]], banned: set[str],
               max_fetches: int, peer_id: str, evicted_at: dict[str, float]) -> list[FetchJob]:
    """One planning round of a fetcher after its adverts are read: nothing when it holds the corpus
    or every one of its `max_fetches` slots is busy; otherwise `choose_fetches` over `order` with
    never-held shards first (`prefer_unread`), for the free slots.

    A peer that holds no shard yet fetches one at a time: it cannot train before its first shard,
    which then gets its source's whole share instead of half, so it starts training sooner
    (docs/simnet.md#figures-behind-the-codes-defaults)."""
    slots = max_fetches if held else 1
    if not needs_shards(order, held) or len(busy) >= slots:
        return []
    return choose_fetches(prefer_unread(order, evicted_at), held, busy, holders_by_shard(adverts), banned,
                          slots - len(busy), peer_id, room_for=slots)


def upload_refusal(open_to_address: int, open_total: int, per_address: int, total: int) -> tuple[int, str] | None:
    """Whether a shard server turns a download away: (HTTP status, reason) when the asker already has
    `per_address` uploads open (429), or has one open while half of the `total` are in use (429: the
    rest go one per address, so a few addresses cannot hold every slot), or `total` are open to
    everyone (503, try another holder)."""
    if open_to_address >= per_address:
        return 429, "shard_uploads"
    if open_total >= total:
        return 503, "shard_uploads_busy"
    if open_to_address >= 1 and open_total >= total // 2:
        return 429, "shard_uploads_shared"
    return None


def upload_piece_bytes(largest: int, stall_s: float, min_bytes_s: float) -> int:
    """Bytes per piece of an upload whose every piece must be taken within `stall_s`: at most what
    `min_bytes_s` moves in that time (a reader below that rate misses a piece's deadline), and at
    most `largest`. `min_bytes_s` 0: no minimum rate, pieces of `largest`."""
    if min_bytes_s <= 0:
        return largest
    return max(1, min(largest, int(min_bytes_s * stall_s)))


@dataclass(frozen=True)
class CachedShard:
    """What eviction needs to know about one cached (not pinned) shard."""

    shard: str
    size: int
    last_used: float
    """When it was last fetched, served or listed for training, on the store's clock."""
    held_since: float
    in_use: bool = False
    """Being served or read right now: never evicted."""


def choose_evictions(cached: list[CachedShard], need: int, free: int, now: float, min_hold_s: float) -> list[str] | None:
    """The least recently used shards to delete so that `need` bytes fit beside `free` free ones,
    or None when they cannot (too few evictable: in use, or held for less than `min_hold_s`, which
    gives the trainer time to read a shard before it goes)."""
    if need <= free:
        return []
    out: list[str] = []
    candidates = sorted((c for c in cached if not c.in_use and now - c.held_since >= min_hold_s),
                        key=lambda c: (c.last_used, c.shard))
    for c in candidates:
        out.append(c.shard)
        free += c.size
        if need <= free:
            return out
    return None


class Penalties:
    """Sources that served bytes not matching the manifest: banned for `ban_s` (the fetcher counts them)."""

    def __init__(self, ban_s: float) -> None:
        self.ban_s = ban_s
        self._until: dict[str, float] = {}

    def penalise(self, source: str, now: float) -> None:
        self._until[source] = now + self.ban_s

    def banned(self, now: float) -> set[str]:
        for source in [s for s, t in self._until.items() if t <= now]:
            del self._until[source]
        return set(self._until)
