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
Thread-safe: fetch threads add and evict while the event loop serves and the reader lists.
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
from typing import Callable, Iterator

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
        self._lock = threading.Lock()
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
        with self._lock:
            if shard in self._reserved:
                return True
            leftovers = self._leftover_parts(shard)
            free = (self.cache_bytes - sum(c.size for c in self._cached.values()) - sum(self._reserved.values())
                    - sum(leftovers.values()))
            cached = self._evictable_view()
            victims = choose_evictions(cached, size, free, self.clock(), self.min_hold_s)
            if victims is None and leftovers:  # parts of abandoned fetches are only progress: drop them first
                for path in leftovers:
                    path.unlink(missing_ok=True)
                victims = choose_evictions(cached, size, free + sum(leftovers.values()), self.clock(), self.min_hold_s)
            if victims is None:
                self._wanted[shard] = size  # the next pass makes room
                return False
            for shard_gone in victims:
                self._evict(shard_gone)
            self._reserved[shard] = size
        if victims:
            self._write_listing()
        return True

    def pass_listing(self) -> list[str]:
        """The shards a new pass of the trainer reads (absolute paths, in manifest order); they stay
        until the next call. First, if shards were refused room during the last pass, evicts the
        least recently used ones (not those being served, never the newest) to free a quarter of
        the cache at least."""
        with self._lock:
            self._pinned = set()
            if self._wanted and self._cached:
                newest = max(self._cached.values(), key=lambda c: (c.held_since, c.shard)).shard
                cached = [dataclasses.replace(c, in_use=c.in_use or c.shard == newest) for c in self._evictable_view()]
                free = self.cache_bytes - sum(c.size for c in self._cached.values()) - sum(self._reserved.values())
                evictable = sum(c.size for c in cached if not c.in_use)
                # Never all: the newest shard stays, so the pass always has something to read.
                need = min(max(max(self._wanted.values()), self.cache_bytes // 4), free + evictable)
                for shard_gone in choose_evictions(cached, need, free, self.clock(), 0.0) or []:
                    self._evict(shard_gone)
                self._wanted.clear()
            self._pinned = set(self._cached)
            paths = self._paths()
        self._write_listing()
        return paths

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
    def _leftover_parts(self, shard: str) -> dict[Path, int]:
        """Part files of fetches no longer under way (lock held): they take room in the cache too."""
        out: dict[Path, int] = {}
        for path in self.dir.glob(".*.part"):
            digest = path.name[1:-len(".part")]
            if digest != shard and digest not in self._reserved:
                try:
                    out[path] = path.stat().st_size
                except FileNotFoundError:
                    pass
        return out

    def _evict(self, shard: str) -> None:
        """Delete one cached shard (lock held). A reader that has it open keeps reading it (POSIX);
        where the OS refuses to delete an open file, it stays for a later round."""
        try:
            (self.dir / self._entries[shard].name).unlink(missing_ok=True)
        except PermissionError:
            return
        del self._cached[shard]
        self._evicted_at[shard] = self.clock()
        log.info("evicted shard %s (least recently used) to make room", self._entries[shard].name)

    def _evictable_view(self) -> list[CachedShard]:
        """The cached shards, those being served or read by the current pass marked in use (lock held)."""
        return [dataclasses.replace(c, in_use=c.shard in self._uses or c.shard in self._pinned)
                for c in self._cached.values()]

    def _paths(self) -> list[str]:
        """Every shard held, in manifest order (lock held)."""
        held = set(self._own) | set(self._cached)
        return [str(self._own[e.sha256] if e.sha256 in self._own else self.dir / e.name)
                for e in self.manifest.shards if e.sha256 in held]

    def _write_listing(self) -> None:
        with self._lock:
            write_atomic(self.listing, "".join(f"{line}\n" for line in self._paths()).encode())


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that readers see the old file or the whole new one, never a part
    (the temporary name is unique per process and thread)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
