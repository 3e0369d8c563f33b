"""ShardStore never holds the lock the event loop takes (held, path_of, using) across disk I/O,
and an older shards.txt never replaces a newer one (peer/shards/store.py)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Callable

import pytest

from peer.shards.manifest import Manifest, ShardEntry
from peer.shards.store import LISTING_NAME, ShardStore

PROMPT_S = 1.0  # the slow disk below blocks for up to 5 s


def _store(tmp: Path, n: int, cache_shards: int) -> tuple[ShardStore, list[str], dict[str, bytes]]:
    blobs = {f"s{i}.tar": bytes([i]) * 100 for i in range(n)}
    entries = [ShardEntry(name, len(b), hashlib.sha256(b).hexdigest(), "mel", 4, 10.0, 1, 1.0) for name, b in blobs.items()]
    store = ShardStore(Manifest(tuple(entries)), tmp / "cache", cache_bytes=100 * cache_shards, min_hold_s=0.0)
    store.open()
    return store, [e.sha256 for e in entries], blobs


def _put(store: ShardStore, digest: str, data: bytes) -> None:
    assert store.reserve(digest)
    store.part_path(digest).write_bytes(data)
    store.add(digest)


def _block(monkeypatch: pytest.MonkeyPatch, method: str, matches: Callable[[Path], bool],
           times: int = 1) -> tuple[threading.Event, threading.Event]:
    """Make `Path.<method>` wait for `release` on the first `times` paths that match (`entered` set then)."""
    entered, release, lock, left = threading.Event(), threading.Event(), threading.Lock(), [times]
    real = getattr(Path, method)

    def slow(self, *args, **kwargs):
        if matches(self):
            with lock:
                hit, left[0] = left[0] > 0, left[0] - 1
            if hit:
                entered.set()
                assert release.wait(5), "the test never released the disk"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, method, slow)
    return entered, release


def _in_thread(fn: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def _prompt(fn: Callable[[], object]) -> object:
    """fn() run in another thread must return within PROMPT_S (it must not wait for the disk)."""
    out: list[object] = []
    thread = _in_thread(lambda: out.append(fn()))
    thread.join(PROMPT_S)
    assert not thread.is_alive(), f"{fn} waited for the disk"
    return out[0]


def _listing_names(store: ShardStore) -> list[str]:
    return [Path(line).name for line in store.listing.read_text().splitlines()]


def test_queries_do_not_wait_for_a_listing_write(tmp_path: Path, monkeypatch) -> None:
    store, d, blobs = _store(tmp_path, 3, cache_shards=3)
    _put(store, d[0], blobs["s0.tar"])
    entered, release = _block(monkeypatch, "write_bytes", lambda p: LISTING_NAME in p.name)
    try:
        store.part_path(d[1]).write_bytes(blobs["s1.tar"])
        assert store.reserve(d[1])
        adding = _in_thread(lambda: store.add(d[1]))
        assert entered.wait(5)  # the listing with s1 is being written
        assert _prompt(store.held) == {d[0], d[1]}
        assert _prompt(lambda: store.path_of(d[1])) == store.dir / "s1.tar"

        def serve() -> bool:
            with store.using(d[0]):
                return True

        assert _prompt(serve)
    finally:
        release.set()
    adding.join(5)
    assert _listing_names(store) == ["s0.tar", "s1.tar"]


def test_queries_do_not_wait_for_an_eviction(tmp_path: Path, monkeypatch) -> None:
    store, d, blobs = _store(tmp_path, 3, cache_shards=2)
    _put(store, d[0], blobs["s0.tar"])
    _put(store, d[1], blobs["s1.tar"])
    entered, release = _block(monkeypatch, "unlink", lambda p: p.name == "s0.tar")
    try:
        reserving = _in_thread(lambda: store.reserve(d[2]))  # full: s0, least recently used, goes
        assert entered.wait(5)
        assert _prompt(store.held) == {d[1]}  # on its way out: neither listed nor served any more
        assert _prompt(lambda: store.path_of(d[0])) is None
        assert _prompt(lambda: store.path_of(d[1])) == store.dir / "s1.tar"
    finally:
        release.set()
    reserving.join(5)
    assert not reserving.is_alive() and not (store.dir / "s0.tar").exists()
    assert d[0] in store.evicted_at() and _listing_names(store) == ["s1.tar"]


def test_queries_do_not_wait_for_a_pass_evicting(tmp_path: Path, monkeypatch) -> None:
    store, d, blobs = _store(tmp_path, 3, cache_shards=2)
    _put(store, d[0], blobs["s0.tar"])
    _put(store, d[1], blobs["s1.tar"])
    store.pass_listing()
    assert not store.reserve(d[2])  # the pass reads both: the next pass makes room
    entered, release = _block(monkeypatch, "unlink", lambda p: p.name == "s0.tar")
    listed: list[list[str]] = []
    try:
        passing = _in_thread(lambda: listed.append(store.pass_listing()))
        assert entered.wait(5)
        assert _prompt(store.held) == {d[1]}
    finally:
        release.set()
    passing.join(5)
    assert [Path(p).name for p in listed[0]] == ["s1.tar"] and _listing_names(store) == ["s1.tar"]


def test_an_older_listing_finishing_last_does_not_replace_a_newer_one(tmp_path: Path, monkeypatch) -> None:
    store, d, blobs = _store(tmp_path, 3, cache_shards=3)
    entered, release = _block(monkeypatch, "write_bytes", lambda p: LISTING_NAME in p.name)  # the first one only
    try:
        store.part_path(d[0]).write_bytes(blobs["s0.tar"])
        assert store.reserve(d[0])
        first = _in_thread(lambda: store.add(d[0]))  # its listing (s0) is slow to write
        assert entered.wait(5)
        _prompt(lambda: _put(store, d[1], blobs["s1.tar"]))  # the newer listing (s0, s1) goes through
        assert _listing_names(store) == ["s0.tar", "s1.tar"]
    finally:
        release.set()
    first.join(5)
    assert not first.is_alive()
    assert _listing_names(store) == ["s0.tar", "s1.tar"]  # the older one, finished last, was dropped
    assert [p.name for p in store.dir.iterdir() if LISTING_NAME in p.name] == [LISTING_NAME]  # no temporary left
