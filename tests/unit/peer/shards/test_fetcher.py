"""The fetcher against real servers: verified shards only, liars refused and banned, transfers resumed elsewhere."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from aiohttp import web

from peer.metrics import Metrics
from peer.shards.config import SwarmDataConfig
from peer.shards.fetcher import ShardFetcher
from peer.shards.store import ShardStore
from tests.unit.shard_server_helpers import Served, dying_handler, manifest_of, own_store, serve_handler, serve_store

BLOBS = {"a.tar": bytes(range(256)) * 3000, "b.tar": bytes(range(255, -1, -1)) * 2000}
MANIFEST = manifest_of(BLOBS)
DIGESTS = {name: hashlib.sha256(data).hexdigest() for name, data in BLOBS.items()}
BY_DIGEST = {hashlib.sha256(data).hexdigest(): data for data in BLOBS.values()}


def _fetcher(tmp: Path, addresses: list[str], cache_bytes: int = 1 << 30) -> tuple[ShardFetcher, Metrics]:
    store = ShardStore(MANIFEST, tmp / "cache", cache_bytes, min_hold_s=0.0)
    store.open()
    metrics = Metrics(process=False)
    cfg = SwarmDataConfig(advert_every_s=0.01, stall_timeout_s=2.0, max_fetches=2)
    return ShardFetcher(store, cfg, "me", lambda: addresses, metrics), metrics


def _run_until(fetcher: ShardFetcher, done, timeout: float = 20.0) -> None:
    """Plan rounds until `done()`, then let the fetches under way end."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        fetcher.step(time.monotonic())
        time.sleep(0.05)
    fetcher.close()
    assert done()


async def _liar(request: web.Request) -> web.Response:
    data = BY_DIGEST[request.match_info["digest"]]
    return web.Response(body=bytes(len(data)))  # the right size, the wrong bytes


def test_bytes_that_do_not_match_are_refused_deleted_and_their_source_banned(tmp_path: Path) -> None:
    liar = serve_handler(_liar, advert=(MANIFEST, sorted(BY_DIGEST)))
    good, _ = serve_store(own_store(tmp_path / "good", BLOBS))
    addresses = [liar.address]
    fetcher, metrics = _fetcher(tmp_path, addresses)
    try:
        # one refusal: holding nothing, the fetcher fetches one shard at a time, and the liar is banned after it
        _run_until(fetcher, lambda: metrics.get("shards_refused_total", reason="hash_mismatch") == 1)
        assert fetcher.store.held() == set() and not list(fetcher.store.dir.glob(".*.part"))
        assert fetcher.penalties.banned(time.monotonic()) == {liar.address}
        fetcher, metrics = _fetcher(tmp_path, addresses)
        fetcher.penalties = _banned(liar.address)
        addresses.append(good.address)
        _run_until(fetcher, lambda: fetcher.store.held() == set(BY_DIGEST))
        for name, data in BLOBS.items():
            assert (fetcher.store.dir / name).read_bytes() == data
        assert metrics.get("shards_fetched_total") == 2
        assert metrics.get("data_bytes_received_total") == sum(map(len, BLOBS.values()))  # nothing from the liar
        assert fetcher.store.listing.read_text().count("\n") == 2
    finally:
        liar.close()
        good.close()


def _banned(address: str):
    from peer.shards.plan import Penalties

    p = Penalties(ban_s=1e9)
    p.penalise(address, time.monotonic())
    return p


def test_undefended_control_a_liar_s_bytes_would_be_cached_without_the_hash_check(tmp_path: Path, monkeypatch) -> None:
    liar = serve_handler(_liar, advert=(MANIFEST, sorted(BY_DIGEST)))
    monkeypatch.setattr("peer.shards.fetcher.sha256_of", lambda path: path.name[1:65])  # "trust the name"
    fetcher, metrics = _fetcher(tmp_path, [liar.address])
    try:
        _run_until(fetcher, lambda: fetcher.store.held() == set(BY_DIGEST))
        assert (fetcher.store.dir / "a.tar").read_bytes() == bytes(len(BLOBS["a.tar"]))  # poisoned
    finally:
        liar.close()


def test_a_transfer_cut_off_resumes_from_another_holder(tmp_path: Path) -> None:
    digest = DIGESTS["a.tar"]
    cut = 300_000

    dying = serve_handler(dying_handler(BY_DIGEST, cut), advert=(MANIFEST, [digest]))
    good, server = serve_store(own_store(tmp_path / "good", BLOBS, present={"a.tar"}))
    addresses = [dying.address]
    fetcher, metrics = _fetcher(tmp_path, addresses)
    try:
        _run_until(fetcher, lambda: metrics.get("shard_source_failures_total", reason="cut_off") >= 1)
        assert fetcher.store.part_path(digest).stat().st_size == cut
        fetcher, metrics = _fetcher(tmp_path, addresses)
        addresses[:] = [good.address]
        _run_until(fetcher, lambda: digest in fetcher.store.held())
        assert metrics.get("data_bytes_received_total") == len(BLOBS["a.tar"]) - cut  # only the rest came
        assert (fetcher.store.dir / "a.tar").read_bytes() == BLOBS["a.tar"]
    finally:
        dying.close()
        good.close()


def test_a_full_cache_waits_and_evicts_least_recently_used(tmp_path: Path) -> None:
    good, _ = serve_store(own_store(tmp_path / "good", BLOBS))
    size = max(map(len, BLOBS.values()))
    fetcher, _metrics = _fetcher(tmp_path, [good.address], cache_bytes=size)  # room for one shard
    try:
        _run_until(fetcher, lambda: len(fetcher.store.held()) == 1)
        first = fetcher.order[0]
        assert fetcher.store.held() == {first}  # this peer's own first shard
        fetcher, _metrics = _fetcher(tmp_path, [good.address], cache_bytes=size)
        _run_until(fetcher, lambda: fetcher.store.held() == {fetcher.order[1]})  # min_hold_s=0: the first made room
    finally:
        good.close()


def test_a_peer_holding_the_corpus_asks_nobody(tmp_path: Path) -> None:
    asked: list[str] = []

    async def count(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response({"manifests": []})

    app = web.Application()
    app.router.add_get("/v1/shards", count)
    listener = Served(app)
    cfg = SwarmDataConfig(advert_every_s=0.01)
    empty = ShardStore(MANIFEST, tmp_path / "empty", 1 << 30, 0.0)
    empty.open()
    full = own_store(tmp_path / "own", BLOBS)
    try:
        for store, want in ((empty, ["/v1/shards"]), (full, [])):  # the first is the control: it does ask
            asked.clear()
            fetcher = ShardFetcher(store, cfg, "me", lambda: [listener.address], Metrics(process=False))
            fetcher.step(time.monotonic())
            fetcher.close()
            assert asked == want
    finally:
        listener.close()


def test_silent_neighbours_are_asked_at_once_not_one_after_another(tmp_path: Path, monkeypatch) -> None:
    import socket

    monkeypatch.setattr("peer.shards.fetcher.ADVERT_STALL_S", 1.0)
    silent = [socket.create_server(("127.0.0.1", 0)) for _ in range(4)]  # accept, never answer
    good, _ = serve_store(own_store(tmp_path / "good", BLOBS))
    addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in silent] + [good.address]
    fetcher, _metrics = _fetcher(tmp_path, addresses)
    try:
        started = time.monotonic()
        fetcher._refresh_adverts(started)
        elapsed = time.monotonic() - started
        assert set(fetcher.holders) == {good.address}
        assert elapsed < 3.0, elapsed  # one after another: 4 x 1 s
    finally:
        fetcher.close()
        good.close()
        for s in silent:
            s.close()


def test_a_source_caught_lying_is_banned_alone(tmp_path: Path) -> None:
    from peer.shards.plan import source_order

    digest, data = DIGESTS["a.tar"], BLOBS["a.tar"]

    async def too_long(request: web.Request) -> web.Response:  # answers the resume with more than the shard holds
        return web.Response(status=206, body=bytes(len(data)),
                            headers={"Content-Range": f"bytes 300000-{len(data) - 1}/{len(data)}"})

    honest = serve_handler(dying_handler(BY_DIGEST, 300_000), advert=(MANIFEST, [digest]))  # goes away at 300 kB
    liar = serve_handler(too_long, advert=(MANIFEST, [digest]))
    addresses = [honest.address, liar.address]
    peer_id = next(p for p in (f"me{i}" for i in range(64)) if source_order(addresses, digest, p) == addresses)
    store = ShardStore(MANIFEST, tmp_path / "cache", 1 << 30, min_hold_s=0.0)
    store.open()
    metrics = Metrics(process=False)
    fetcher = ShardFetcher(store, SwarmDataConfig(advert_every_s=0.01, max_fetches=1), peer_id, lambda: addresses, metrics)
    try:
        _run_until(fetcher, lambda: metrics.get("shards_refused_total", reason="too_long") == 1)
        assert fetcher.penalties.banned(time.monotonic()) == {liar.address}
        assert not store.part_path(digest).exists()  # what the liar may have written is gone
    finally:
        honest.close()
        liar.close()
