"""Fetch planning (pure) and the shard store on disk: order per peer, sources, LRU eviction, listing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from peer.shards.manifest import MANIFEST_NAME, Manifest, ShardEntry
from peer.shards.plan import CachedShard, Penalties, choose_evictions, choose_fetches, fetch_order, prefer_unread, source_order
from peer.shards.store import ShardStore

SHARDS = [f"{i:064x}" for i in range(1, 9)]


def test_fetch_order_is_a_rotation_fixed_by_the_peer_id() -> None:
    a = fetch_order(SHARDS[::-1], "peer-a")
    assert a == fetch_order(SHARDS, "peer-a")  # deterministic, whatever order the manifest lists
    k = sorted(SHARDS).index(a[0])
    assert a == sorted(SHARDS)[k:] + sorted(SHARDS)[:k]  # a rotation of the hash order
    firsts = {fetch_order(SHARDS, f"peer-{i}")[0] for i in range(32)}
    assert len(firsts) >= 6  # 32 peers start on (almost) every one of the 8 shards, not all on the first
    assert fetch_order([], "p") == []


def test_choose_fetches_skips_held_busy_unadvertised_and_banned() -> None:
    order = SHARDS[:5]
    holders = {SHARDS[0]: {"x:1"}, SHARDS[1]: {"x:1", "y:2"}, SHARDS[2]: {"bad:3"}, SHARDS[4]: {"y:2"}}
    jobs = choose_fetches(order, held={SHARDS[0]}, busy=set(), holders=holders, banned={"bad:3"}, slots=5,
                          peer_id="me", room_for=5)
    assert [j.shard for j in jobs] == [SHARDS[1], SHARDS[4]]  # 2 banned-only, 3 advertised by nobody
    assert set(jobs[0].sources) == {"x:1", "y:2"}
    assert choose_fetches(order, set(), {SHARDS[1]}, holders, set(), 1, "me", 5)[0].shard == SHARDS[0]
    assert choose_fetches(order, set(), set(), holders, set(), 5, "me", room_for=1) == choose_fetches(
        order, set(), set(), holders, set(), 1, "me", 5)


def test_partial_holders_come_before_the_holder_of_everything() -> None:
    order = SHARDS[:4]
    holders = {s: {"seed:1"} for s in order}  # the seed advertises the whole corpus
    holders[SHARDS[2]] |= {"p:2", "q:3"}  # two peers that hold one shard each
    jobs = choose_fetches(order, set(), set(), holders, set(), slots=2, peer_id="me", room_for=2)
    assert [j.shard for j in jobs] == [SHARDS[2], SHARDS[0]]  # what a partial holder has first, then `order`
    assert set(jobs[0].sources) == {"p:2", "q:3"}  # not the seed: it is no fallback for what others hold
    assert jobs[1].sources == ("seed:1",)


def test_source_order_spreads_askers_over_holders() -> None:
    holders = [f"h{i}:1" for i in range(4)]
    firsts = {source_order(holders, SHARDS[0], f"peer-{i}")[0] for i in range(40)}
    assert firsts == set(holders)
    assert sorted(source_order(holders, SHARDS[0], "p")) == sorted(holders)


def test_evictions_are_least_recently_used_and_spare_young_or_busy_shards() -> None:
    cached = [CachedShard("a", 10, last_used=5.0, held_since=0.0), CachedShard("b", 10, last_used=1.0, held_since=0.0),
              CachedShard("c", 10, last_used=0.5, held_since=95.0), CachedShard("d", 10, last_used=0.1, held_since=0.0, in_use=True)]
    assert choose_evictions(cached, need=5, free=5, now=100.0, min_hold_s=10.0) == []
    assert choose_evictions(cached, need=10, free=5, now=100.0, min_hold_s=10.0) == ["b"]
    assert choose_evictions(cached, need=25, free=5, now=100.0, min_hold_s=10.0) == ["b", "a"]
    assert choose_evictions(cached, need=30, free=5, now=100.0, min_hold_s=10.0) is None  # c too young, d in use
    assert choose_evictions(cached, need=30, free=5, now=200.0, min_hold_s=10.0) == ["c", "b", "a"]


def test_penalties_expire() -> None:
    p = Penalties(ban_s=10.0)
    p.penalise("x:1", now=0.0)
    assert p.banned(5.0) == {"x:1"} and p.banned(10.0) == set()


# ------------------------------------------------------------------------------------------ the store
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _corpus(tmp: Path, n: int, size: int = 100) -> tuple[Manifest, dict[str, bytes]]:
    blobs = {f"s{i}.tar": bytes([i]) * size for i in range(n)}
    entries = [ShardEntry(name, len(b), hashlib.sha256(b).hexdigest(), "mel", 4, 10.0, 1, 1.0) for name, b in blobs.items()]
    return Manifest(tuple(entries)), blobs


def _put(store: ShardStore, name: str, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    assert store.reserve(digest)
    store.part_path(digest).write_bytes(data)
    store.add(digest)
    return digest


def _listed(store: ShardStore) -> list[str]:
    return [Path(line).name for line in store.listing.read_text().splitlines()]


def test_store_lists_adds_and_evicts_least_recently_used(tmp_path: Path) -> None:
    manifest, blobs = _corpus(tmp_path, 4)
    clock = Clock()
    store = ShardStore(manifest, tmp_path / "cache", cache_bytes=250, min_hold_s=60.0, clock=clock)
    store.open()
    assert store.listing.read_text() == "" and (store.dir / MANIFEST_NAME).read_bytes() == manifest.canonical_bytes()
    assert store.path_of(manifest.hash) == store.dir / MANIFEST_NAME
    d0 = _put(store, "s0.tar", blobs["s0.tar"])
    clock.t += 1
    d1 = _put(store, "s1.tar", blobs["s1.tar"])
    assert _listed(store) == ["s0.tar", "s1.tar"] and store.cached_bytes() == 200
    d2 = hashlib.sha256(blobs["s2.tar"]).hexdigest()
    assert not store.reserve(d2)  # full, and both shards younger than min_hold_s
    clock.t += 100
    with store.using(d0):  # d0 is being served: used now, and not evictable meanwhile
        assert store.reserve(d2)
    assert store.held() == {d0} and not (store.dir / "s1.tar").exists() and _listed(store) == ["s0.tar"]
    store.part_path(d2).write_bytes(blobs["s2.tar"])
    store.add(d2)
    assert _listed(store) == ["s0.tar", "s2.tar"] and store.path_of(d1) is None


def test_store_reopens_with_what_still_hashes_right_and_own_shards_pinned(tmp_path: Path) -> None:
    manifest, blobs = _corpus(tmp_path, 3)
    own = tmp_path / "own"
    own.mkdir()
    (own / "s0.tar").write_bytes(blobs["s0.tar"])
    (own / "s1.tar").write_bytes(b"x" * 100)  # same size, other bytes: not ours to serve
    store = ShardStore(manifest, tmp_path / "cache", cache_bytes=100, min_hold_s=0.0, own_dir=own, clock=Clock())
    store.open()
    d0 = hashlib.sha256(blobs["s0.tar"]).hexdigest()
    assert store.held() == store.own() == {d0} and store.path_of(d0) == own / "s0.tar"
    d2 = _put(store, "s2.tar", blobs["s2.tar"])
    (store.dir / "s1.tar").write_bytes(b"y" * 100)  # a tampered file left in the cache
    again = ShardStore(manifest, tmp_path / "cache", cache_bytes=100, min_hold_s=0.0, own_dir=own, clock=Clock())
    again.open()
    assert again.held() == {d0, d2} and not (again.dir / "s1.tar").exists()
    assert _listed(again) == ["s0.tar", "s2.tar"] and str(own / "s0.tar") in again.listing.read_text()
    d1 = hashlib.sha256(blobs["s1.tar"]).hexdigest()
    assert again.reserve(d1)  # own shards never count: s2 goes, s0 stays
    assert again.held() == {d0}


def test_release_gives_room_back(tmp_path: Path) -> None:
    manifest, blobs = _corpus(tmp_path, 2)
    store = ShardStore(manifest, tmp_path / "c", cache_bytes=100, min_hold_s=1e9, clock=Clock())
    store.open()
    d0, d1 = (hashlib.sha256(blobs[n]).hexdigest() for n in ("s0.tar", "s1.tar"))
    assert store.reserve(d0) and not store.reserve(d1)
    store.part_path(d0).write_bytes(b"half")
    store.release(d0)
    assert store.part_path(d0).exists()  # kept: a later fetch resumes it
    assert store.reserve(d1)
    store.release(d1, keep_part=False)
    with pytest.raises(KeyError):
        store.reserve("0" * 64)


def test_parts_of_abandoned_fetches_count_and_go_first(tmp_path: Path) -> None:
    manifest, blobs = _corpus(tmp_path, 3)
    store = ShardStore(manifest, tmp_path / "c", cache_bytes=200, min_hold_s=1e9, clock=Clock())
    store.open()
    d0, d1, d2 = (hashlib.sha256(blobs[f"s{i}.tar"]).hexdigest() for i in range(3))
    _put(store, "s0.tar", blobs["s0.tar"])
    assert store.reserve(d1)
    store.part_path(d1).write_bytes(blobs["s1.tar"][:60])
    store.release(d1)  # abandoned: its 60 bytes stay for a resume
    store.part_path(d2).write_bytes(blobs["s2.tar"][:10])
    assert store.reserve(d2)  # its own part is not counted against it; d1's is, and is dropped to make room
    assert not store.part_path(d1).exists() and store.part_path(d2).exists()


def test_prefer_unread() -> None:
    order = SHARDS[:4]
    assert prefer_unread(order, {}) == order
    assert prefer_unread(order, {SHARDS[0]: 5.0, SHARDS[1]: 3.0}) == [SHARDS[2], SHARDS[3], SHARDS[1], SHARDS[0]]


def test_a_pass_keeps_what_it_listed_and_the_next_one_rotates(tmp_path: Path) -> None:
    manifest, blobs = _corpus(tmp_path, 5)
    clock = Clock()
    store = ShardStore(manifest, tmp_path / "c", cache_bytes=300, min_hold_s=0.0, clock=clock)
    store.open()
    d = [hashlib.sha256(blobs[f"s{i}.tar"]).hexdigest() for i in range(5)]
    for i in range(3):
        clock.t += 1
        _put(store, f"s{i}.tar", blobs[f"s{i}.tar"])
    assert [Path(p).name for p in store.pass_listing()] == ["s0.tar", "s1.tar", "s2.tar"]
    assert not store.reserve(d[3])  # the pass reads all three: none goes while it runs
    assert store.held() == set(d[:3])
    clock.t += 1
    listed = store.pass_listing()  # the next pass makes room first: a quarter of the cache, the oldest
    assert [Path(p).name for p in listed] == ["s1.tar", "s2.tar"] and store.evicted_at() == {d[0]: clock.t}
    assert store.reserve(d[3]) and not store.reserve(d[4])
    store.release(d[3])
    store._wanted[d[4]] = 10_000  # however much is wanted, the newest shard stays
    assert [Path(p).name for p in store.pass_listing()] == ["s2.tar"]


def test_the_data_reader_takes_each_pass_from_the_store(tmp_path: Path) -> None:
    from gossip_tts.data.errors import SourceError
    from gossip_tts.data.sources import list_shards, provide_listing

    manifest, blobs = _corpus(tmp_path, 2)
    store = ShardStore(manifest, tmp_path / "c", cache_bytes=1000, min_hold_s=0.0, clock=Clock())
    store.open()
    _put(store, "s0.tar", blobs["s0.tar"])
    source = str(store.listing)
    provide_listing(source, store.pass_listing)
    try:
        assert list_shards(source) == [str(store.dir / "s0.tar")]
        _put(store, "s1.tar", blobs["s1.tar"])
        assert list_shards(source) == [str(store.dir / "s0.tar"), str(store.dir / "s1.tar")]
    finally:
        provide_listing(source, None)
    store.listing.write_text("")  # without the provider, the file is read as any shard list
    with pytest.raises(SourceError, match="holds no .tar shard"):
        list_shards(source)


def test_adverts_are_a_bitmap_over_the_manifest_order() -> None:
    from peer.shards.advert import advert_body, decode_have, encode_have, parse_advert

    order = [f"{i:064x}" for i in range(9)]  # nine shards: two bytes, the second with one bit used
    assert encode_have(order, {order[0], order[8]}) == "8080"
    assert encode_have(order, set(order)) == "ff80" and encode_have(order, set()) == "0000"
    assert decode_have(order, "8080") == {order[0], order[8]}
    body = advert_body("m" * 64, order, {order[3]})
    assert body == {"manifests": [{"hash": "m" * 64, "have": "1000"}]}
    assert parse_advert(body, "m" * 64, order) == {order[3]} and parse_advert(body, "x" * 64, order) == set()
    for bad in ("80", "808000", "zz80", None, "80  ", " 8 0"):  # spaces: fromhex would skip them
        with pytest.raises(ValueError):
            decode_have(order, bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="manifests"):
        parse_advert({"shards": []}, "m" * 64, order)


def test_an_advert_nested_past_the_parsers_depth_is_a_bad_advert(monkeypatch) -> None:
    """A RecursionError is no ValueError: uncaught, it ended the fetcher's whole advert round."""
    from peer.shards import download

    monkeypatch.setattr(download, "get_capped", lambda *a, **k: b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(download.SourceFailed, match="/v1/shards"):
        download.read_advert_doc("127.0.0.1:9", 1.0)
