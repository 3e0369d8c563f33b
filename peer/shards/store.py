"""The shards this peer holds, on disk: its own (beside a local manifest) and a size-capped cache.

Layout, under `cache_dir/<first 16 hex digits of the manifest hash>/`:

    swarm-manifest.json   the manifest's canonical bytes (served like a shard, by its hash)
    swarm-manifest.signed.json  with a signed manifest, the signed document (served by its hash)
    <name>.tar            a fetched shard, complete and verified
    .<sha256>.part        a download in progress (hidden: no reader lists it); kept across
                          sources, so a transfer resumes where the last source stopped; one
                          left by an abandoned fetch counts against the cache size and is
                          the first thing dropped when room is needed
    shards.txt            every shard held, one absolute path a line, rewritten (atomically)
                          whenever a shard comes or goes

The trainer reads `pass_listing()` at the start of every pass (gossip_tts hands it to the
data reader in place of shards.txt): the shards held then, which stay until the next pass
starts, so a pass never finds its shards gone. When the cache was too full to take a shard
during a pass, the next pass first evicts the least recently used shards (a quarter of the
cache at least), and the fetcher fills that room with shards this peer has not read yet:
a peer with a small cache moves through the corpus pass by pass. Between passes (no trainer
reading), `reserve` evicts by itself, sparing shards younger than `min_hold_s`.

A shard enters the cache only by `add`, after its SHA-256 matched the manifest; whatever was
there before a restart is hashed again when the store opens. Own shards are never evicted
and do not count against the cache size; shards being served are not evicted either.
Thread-safe: fetch threads add and evict while the event loop serves and the reader lists. The
lock the event loop takes (`held`, `path_of`, `using`) guards only the in-memory maps: choices
are made under it, and the disk work (deleting, rewriting shards.txt) after it is released, so
a slow disk never stalls the event loop. Each listing carries a generation number, and one
older than the listing on disk is dropped rather than written over it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import AbstractSet, Callable, Iterator

from peer.shards.manifest import MANIFEST_NAME, Manifest, ShardEntry
from peer.shards.plan import CachedShard, choose_evictions
from peer.shards.signed import SIGNED_MANIFEST_NAME, SignedManifest

log = logging.getLogger(__name__)
LISTING_NAME = "shards.txt"
_HASH_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class ShardStore:
    """See the module docstring. `clock` is monotonic seconds (tests pass their own)."""

    def __init__(self, manifest: Manifest, cache_dir: Path, cache_bytes: int, min_hold_s: float,
                 own_dir: Path | None = None, clock: Callable[[], float] = time.monotonic,
                 signed: SignedManifest | None = None) -> None:
        if signed is not None and signed.manifest != manifest:
            raise ValueError("the signed document is for another manifest")
        self.manifest, self.cache_bytes, self.min_hold_s, self.signed = manifest, cache_bytes, min_hold_s, signed
        self.own_dir, self.clock = (Path(own_dir).resolve() if own_dir is not None else None), clock
        self.dir = Path(cache_dir).resolve() / manifest.hash[:16]  # the listing names absolute paths
        self.listing = self.dir / LISTING_NAME
        self._entries = manifest.by_hash()
        self._lock = threading.Lock()  # the in-memory maps below; never held across disk I/O
        self._room_lock = threading.Lock()  # one eviction round at a time, its deletes included
        self._listing_lock = threading.Lock()  # orders shards.txt replacements by generation
        self._listing_gen = 0  # the newest listing taken (under _lock)
        self._listing_done = 0  # the listing on disk (under _listing_lock)
        self._own: dict[str, Path] = {}
        self._cached: dict[str, CachedShard] = {}
        self._reserved: dict[str, int] = {}
        self._uses: dict[str, int] = {}
        self._pinned: set[str] = set()  # what the current pass of the trainer reads
        self._evicted_at: dict[str, float] = {}
        self._wanted: dict[str, int] = {}  # shards refused room since the pass began

    # ------------------------------------------------------------------ opening
    def open(self) -> None:
        """Create the folder, write the manifest, and take stock: own shards and earlier cached
        ones whose bytes still hash right (anything else is deleted)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomic(self.dir / MANIFEST_NAME, self.manifest.canonical_bytes())
        if self.signed is not None:
            write_atomic(self.dir / SIGNED_MANIFEST_NAME, self.signed.data)
        if self.own_dir is not None:
            for e in self.manifest.shards:
                path = Path(self.own_dir) / e.name
                if path.is_file() and path.stat().st_size == e.size and sha256_of(path) == e.sha256:
                    self._own[e.sha256] = path
        now = self.clock()
        for e in self.manifest.shards:
            path = self.dir / e.name
            if e.sha256 in self._own or not path.exists():
                continue
            if path.stat().st_size == e.size and sha256_of(path) == e.sha256:
                self._cached[e.sha256] = CachedShard(e.sha256, e.size, now, now - self.min_hold_s)
            else:
                log.warning("cached shard %s does not match the manifest; deleted", path)
                path.unlink()
        self._write_listing()

    # ------------------------------------------------------------------ queries
    def held(self) -> set[str]:
        with self._lock:
            return set(self._own) | set(self._cached)

    def own(self) -> set[str]:
        with self._lock:
            return set(self._own)

    def is_manifest(self, digest: str) -> bool:
        """Whether `digest` names the manifest or its signed document (not a shard)."""
        return digest == self.manifest.hash or (self.signed is not None and digest == self.signed.hash)

    def entry(self, shard: str) -> ShardEntry | None:
        return self._entries.get(shard)

    def evicted_at(self) -> dict[str, float]:
        """When each shard this store evicted went (the fetcher fetches those last)."""
        with self._lock:
            return dict(self._evicted_at)

    def cached_bytes(self) -> int:
        with self._lock:
            return sum(c.size for c in self._cached.values())

    def path_of(self, digest: str) -> Path | None:
        """The file to serve for a content hash: a shard held, the manifest itself, or its signed document."""
        if digest == self.manifest.hash:
            return self.dir / MANIFEST_NAME
        if self.signed is not None and digest == self.signed.hash:
            return self.dir / SIGNED_MANIFEST_NAME
        with self._lock:
            if digest in self._own:
                return self._own[digest]
            if digest in self._cached:
                return self.dir / self._entries[digest].name
        return None

    def part_path(self, shard: str) -> Path:
        return self.dir / f".{shard}.part"

    # ------------------------------------------------------------------ use, room, adding
    @contextmanager
    def using(self, shard: str) -> Iterator[None]:
        """Mark a shard in use (being served) for the `with` block: it is not evicted meanwhile."""
        with self._lock:
            self._uses[shard] = self._uses.get(shard, 0) + 1
            if shard in self._cached:
                self._cached[shard] = dataclasses.replace(self._cached[shard], last_used=self.clock())
        try:
            yield
        finally:
            with self._lock:
                self._uses[shard] -= 1
                if not self._uses[shard]:
                    del self._uses[shard]

    def reserve(self, shard: str) -> bool:
        """Make room for one shard about to be fetched, evicting least recently used ones if needed;
        False when there is no room now (nothing evictable yet)."""
        size = self._entries[shard].size
        with self._room_lock:  # held through the deletes: no fetch reserves a part being dropped
            with self._lock:
                if shard in self._reserved:
                    return True
            parts = self._part_files()
            with self._lock:
                leftovers = {path: n for path, (digest, n) in parts.items()
                             if digest != shard and digest not in self._reserved}
                free = (self.cache_bytes - sum(c.size for c in self._cached.values()) - sum(self._reserved.values())
                        - sum(leftovers.values()))
                cached = self._evictable_view()
                victims = choose_evictions(cached, size, free, self.clock(), self.min_hold_s)
                drop: list[Path] = []
                if victims is None and leftovers:  # parts of abandoned fetches are only progress: drop them first
                    drop = list(leftovers)
                    victims = choose_evictions(cached, size, free + sum(leftovers.values()), self.clock(), self.min_hold_s)
                if victims is None:
                    self._wanted[shard] = size  # the next pass makes room
                else:
                    self._reserved[shard] = size
                gone = self._take_out(victims or [])
            for path in drop:
                path.unlink(missing_ok=True)
            self._delete(gone)
        if gone:
            self._write_listing()
        return victims is not None

    def pass_listing(self) -> list[str]:
        """The shards a new pass of the trainer reads (absolute paths, in manifest order); they stay
        until the next call. First, if shards were refused room during the last pass, evicts the
        least recently used ones (not those being served, never the newest) to free a quarter of
        the cache at least."""
        with self._room_lock:
            with self._lock:
                self._pinned = set()
                gone = self._take_out(self._pass_victims())
            self._delete(gone)
            with self._lock:
                self._pinned = set(self._cached)
                gen, cached = self._snapshot()
        paths = self._paths(cached)
        self._publish(gen, paths)
        return paths

    def _pass_victims(self) -> list[str]:
        """What a new pass evicts (lock held, nothing pinned): see `pass_listing`."""
        if not (self._wanted and self._cached):
            return []
        newest = max(self._cached.values(), key=lambda c: (c.held_since, c.shard)).shard
        cached = [dataclasses.replace(c, in_use=c.in_use or c.shard == newest) for c in self._evictable_view()]
        free = self.cache_bytes - sum(c.size for c in self._cached.values()) - sum(self._reserved.values())
        evictable = sum(c.size for c in cached if not c.in_use)
        # Never all: the newest shard stays, so the pass always has something to read.
        need = min(max(max(self._wanted.values()), self.cache_bytes // 4), free + evictable)
        self._wanted.clear()
        return choose_evictions(cached, need, free, self.clock(), 0.0) or []

    def release(self, shard: str, keep_part: bool = True) -> None:
        """A fetch ended without adding the shard: give its room back (and its partial file, unless kept)."""
        with self._lock:
            self._reserved.pop(shard, None)
        if not keep_part:
            self.part_path(shard).unlink(missing_ok=True)

    def add(self, shard: str) -> Path:
        """Move a complete, verified partial file into place and list it for the trainer."""
        entry = self._entries[shard]
        target = self.dir / entry.name
        os.replace(self.part_path(shard), target)
        now = self.clock()
        with self._lock:
            self._reserved.pop(shard, None)
            self._cached[shard] = CachedShard(shard, entry.size, now, now)
        self._write_listing()
        return target

    # ------------------------------------------------------------------ internals
    def _part_files(self) -> dict[Path, tuple[str, int]]:
        """Every partial file on disk, with its shard and size (lock not held: this reads the disk).
        Those of fetches no longer under way take room in the cache too."""
        out: dict[Path, tuple[str, int]] = {}
        for path in self.dir.glob(".*.part"):
            try:
                out[path] = (path.name[1:-len(".part")], path.stat().st_size)
            except FileNotFoundError:
                pass
        return out

    def _take_out(self, victims: list[str]) -> list[tuple[CachedShard, float | None]]:
        """Forget the shards chosen for eviction (lock held): from now on they are neither listed
        nor served. Returns what `_delete` needs to delete them, or to take one back."""
        now, gone = self.clock(), []
        for shard in victims:
            gone.append((self._cached.pop(shard), self._evicted_at.get(shard)))
            self._evicted_at[shard] = now
        return gone

    def _delete(self, gone: list[tuple[CachedShard, float | None]]) -> None:
        """Delete evicted shards' files (lock not held). A reader that has one open keeps reading it
        (POSIX); where the OS refuses to delete an open file, the shard is held again for a later round."""
        kept = []
        for cached, before in gone:
            name = self._entries[cached.shard].name
            try:
                (self.dir / name).unlink(missing_ok=True)
            except PermissionError:
                kept.append((cached, before))
                continue
            log.info("evicted shard %s (least recently used) to make room", name)
        if kept:
            with self._lock:
                for cached, before in kept:
                    self._cached[cached.shard] = cached
                    if before is None:
                        self._evicted_at.pop(cached.shard, None)
                    else:
                        self._evicted_at[cached.shard] = before

    def _evictable_view(self) -> list[CachedShard]:
        """The cached shards, those being served or read by the current pass marked in use (lock held)."""
        return [dataclasses.replace(c, in_use=c.shard in self._uses or c.shard in self._pinned)
                for c in self._cached.values()]

    def _snapshot(self) -> tuple[int, frozenset[str]]:
        """A new listing generation and the cached shards it lists (lock held)."""
        self._listing_gen += 1
        return self._listing_gen, frozenset(self._cached)

    def _paths(self, cached: AbstractSet[str]) -> list[str]:
        """Every shard held, own ones (fixed once open) and `cached`, in manifest order."""
        return [str(self._own[e.sha256] if e.sha256 in self._own else self.dir / e.name)
                for e in self.manifest.shards if e.sha256 in self._own or e.sha256 in cached]

    def _write_listing(self) -> None:
        with self._lock:
            gen, cached = self._snapshot()
        self._publish(gen, self._paths(cached))

    def _publish(self, gen: int, paths: list[str]) -> None:
        """Write shards.txt (store lock not held: several MB with a large manifest) atomically,
        unless a newer generation is already on disk: listings may finish out of order."""
        with self._listing_lock:  # the event loop never takes this one
            if gen <= self._listing_done:
                return
        tmp = self.listing.with_name(f".{LISTING_NAME}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            tmp.write_bytes("".join(f"{line}\n" for line in paths).encode())
            with self._listing_lock:
                if gen > self._listing_done:
                    os.replace(tmp, self.listing)
                    self._listing_done = gen
        finally:
            tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one, never a part
    (the temporary name is unique per process and thread)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
