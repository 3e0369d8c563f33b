"""The shards this peer holds, on disk: its own (beside a local manifest) and a size-capped cache.

Layout, under `cache_dir/<first 16 hex digits of the manifest hash>/`:

    swarm-manifest.json   the manifest's canonical bytes (served like a shard, by its hash)
    <name>.tar            a fetched shard, complete and verified
    .<sha256>.part        a download in progress (hidden: no reader lists it); kept across
                          sources, so a transfer resumes where the last source stopped; one
                          left by an abandoned fetch counts against the cache size and is
                          the first thing dropped when room is needed
    shards.txt            every shard held, one absolute path a line: the trainer's data
                          source, rewritten (atomically) whenever a shard comes or goes, and
                          re-read by the data reader at every pass

A shard enters the cache only by `add`, after its SHA-256 matched the manifest; whatever was
there before a restart is hashed again when the store opens. An evicted shard that the
reader has open is read to its end (POSIX); one it listed for a pass but had not opened yet
is skipped and counted in the reader's `shard_errors`. Own shards are never evicted
and do not count against the cache size. Thread-safe: fetch threads add and evict while the
event loop serves.
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
                 own_dir: Path | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.manifest, self.cache_bytes, self.min_hold_s = manifest, cache_bytes, min_hold_s
        self.own_dir, self.clock = (Path(own_dir).resolve() if own_dir is not None else None), clock
        self.dir = Path(cache_dir).resolve() / manifest.hash[:16]  # the listing names absolute paths
        self.listing = self.dir / LISTING_NAME
        self._entries = manifest.by_hash()
        self._lock = threading.Lock()
        self._own: dict[str, Path] = {}
        self._cached: dict[str, CachedShard] = {}
        self._reserved: dict[str, int] = {}
        self._uses: dict[str, int] = {}

    # ------------------------------------------------------------------ opening
    def open(self) -> None:
        """Create the folder, write the manifest, and take stock: own shards and earlier cached
        ones whose bytes still hash right (anything else is deleted)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.dir / MANIFEST_NAME, self.manifest.canonical_bytes())
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

    def entry(self, shard: str) -> ShardEntry | None:
        return self._entries.get(shard)

    def cached_bytes(self) -> int:
        with self._lock:
            return sum(c.size for c in self._cached.values())

    def path_of(self, digest: str) -> Path | None:
        """The file to serve for a content hash: a shard held, or the manifest itself."""
        if digest == self.manifest.hash:
            return self.dir / MANIFEST_NAME
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
            cached = [dataclasses.replace(c, in_use=c.shard in self._uses) for c in self._cached.values()]
            victims = choose_evictions(cached, size, free, self.clock(), self.min_hold_s)
            if victims is None and leftovers:  # parts of abandoned fetches are only progress: drop them first
                for path in leftovers:
                    path.unlink(missing_ok=True)
                victims = choose_evictions(cached, size, free + sum(leftovers.values()), self.clock(), self.min_hold_s)
            if victims is None:
                return False
            for shard_gone in victims:
                self._evict(shard_gone)
            self._reserved[shard] = size
        if victims:
            self._write_listing()
        return True

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
        log.info("evicted shard %s (least recently used) to make room", self._entries[shard].name)

    def _write_listing(self) -> None:
        with self._lock:
            held = set(self._own) | set(self._cached)
            lines = [str(self._own[e.sha256] if e.sha256 in self._own else self.dir / e.name)
                     for e in self.manifest.shards if e.sha256 in held]
            _write_atomic(self.listing, "".join(f"{line}\n" for line in lines).encode())


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)
