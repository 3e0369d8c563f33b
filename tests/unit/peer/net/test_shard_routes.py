"""GET /v1/shards and /v1/shards/HASH on a real server, read by the fetcher's own download code."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web

from peer.metrics import Metrics
import peer.net.shard_routes as routes
from peer.net.shard_routes import RangeNotSatisfiable, parse_range
from peer.shards.pacer import UploadPacer
from peer.shards.config import SwarmDataConfig
from peer.shards.download import SourceFailed, SourceLied, fetch_range, get_capped, read_advert
from tests.unit.shard_server_helpers import dying_handler, own_store, serve_handler, serve_store

BLOB = bytes(range(256)) * 4096  # 1 MiB
DIGEST = hashlib.sha256(BLOB).hexdigest()


def test_parse_range() -> None:
    assert parse_range(None, 100) is None and parse_range("items=1-2", 100) is None
    assert parse_range("bytes=10-", 100) == (10, 100)
    assert parse_range("bytes=10-19", 100) == (10, 20)
    assert parse_range("bytes=90-500", 100) == (90, 100)
    assert parse_range("bytes=-30", 100) == (70, 100)
    assert parse_range("bytes=0-1,5-6", 100) is None  # several ranges: the whole file
    for bad in ("bytes=100-", "bytes=20-10", "bytes=-0"):
        with pytest.raises(RangeNotSatisfiable):
            parse_range(bad, 100)


@pytest.fixture(params=[True, False], ids=["sendfile", "read-write"])
def served(tmp_path: Path, request, monkeypatch):
    monkeypatch.setattr(routes, "SENDFILE", request.param)
    store = own_store(tmp_path, {"a.tar": BLOB})
    metrics = Metrics(process=False)
    srv, server = serve_store(store, SwarmDataConfig(max_uploads_per_address=1, upload_deadline_s=2.0), metrics)
    yield srv, store, metrics
    srv.close()
    assert server._sendfile is request.param  # the sendfile variant did not quietly fall back to read-write


def _eventually(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return check()


def _fetch(address: str, part: Path, stop: threading.Event | None = None) -> list[int]:
    got: list[int] = []
    fetch_range(address, DIGEST, part, len(BLOB), 5.0, time.monotonic() + 30, stop or threading.Event(), got.append)
    return got


def test_lists_and_streams_whole_and_resumed(served, tmp_path: Path) -> None:
    srv, store, metrics = served
    order = [s.sha256 for s in store.manifest.shards]
    assert read_advert(srv.address, store.manifest.hash, order, 5.0) == {DIGEST}
    assert read_advert(srv.address, "0" * 64, order, 5.0) == set()
    assert get_capped(srv.address, f"/v1/shards/{store.manifest.hash}", 1 << 20, 5.0) == store.manifest.canonical_bytes()
    part = tmp_path / "p"
    assert sum(_fetch(srv.address, part)) == len(BLOB) and part.read_bytes() == BLOB
    part.write_bytes(BLOB[:300_000])  # a transfer cut off elsewhere: only the rest comes
    assert sum(_fetch(srv.address, part)) == len(BLOB) - 300_000 and part.read_bytes() == BLOB
    assert _eventually(lambda: metrics.get("shards_served_total") == 2)  # counted just after the last byte left
    manifest_bytes = len(store.manifest.canonical_bytes())
    assert metrics.get("data_bytes_sent_total") == manifest_bytes + 2 * len(BLOB) - 300_000


def test_unknown_and_malformed_hashes(served) -> None:
    srv, _store, metrics = served
    with pytest.raises(SourceFailed, match="http_404"):
        get_capped(srv.address, "/v1/shards/" + "ab" * 32, 100, 5.0)
    with pytest.raises(SourceFailed, match="http_400"):
        get_capped(srv.address, "/v1/shards/..%2Fetc", 100, 5.0)
    assert metrics.get("http_refused_total", reason="bad_shard_hash") == 1


def _stalled_reader(address: str, digest: str) -> socket.socket:
    """Ask for a shard and never read: the upload stays open once the socket buffers are full."""
    host, port = address.split(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    s.sendall(f"GET /v1/shards/{digest} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s


def test_per_address_limit_and_slow_reader_deadline(tmp_path: Path) -> None:
    big = BLOB * 48  # far more than loopback socket buffers hold
    digest = hashlib.sha256(big).hexdigest()
    metrics = Metrics(process=False)
    srv, _server = serve_store(own_store(tmp_path, {"big.tar": big}),
                               SwarmDataConfig(max_uploads_per_address=1, upload_deadline_s=2.0), metrics)
    try:
        slow = _stalled_reader(srv.address, digest)
        assert _eventually(lambda: _server.uploads == 1)
        with pytest.raises(SourceFailed, match="http_429"):
            get_capped(srv.address, f"/v1/shards/{digest}", len(big), 5.0)
        assert metrics.get("http_refused_total", reason="shard_uploads") == 1
        assert _eventually(lambda: metrics.get("http_refused_total", reason="slow_shard_reader") == 1)  # upload_deadline_s
        assert _server.uploads == 0
        slow.close()
        assert len(get_capped(srv.address, f"/v1/shards/{digest}", len(big), 5.0)) == len(big)  # the slot is free again
    finally:
        srv.close()


def _trickling_reader(address: str, digest: str, bytes_s: float, stop: threading.Event) -> socket.socket:
    """Ask for a shard and read it at about `bytes_s`, until `stop` or the server cuts it off."""
    s = _stalled_reader(address, digest)

    def read() -> None:
        while not stop.is_set():
            try:
                if not s.recv(int(bytes_s / 20)):
                    return
            except OSError:
                return
            time.sleep(0.05)

    threading.Thread(target=read, daemon=True).start()
    return s


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "read-write"])
def test_a_stalled_or_trickling_reader_is_cut_at_the_stall_window(tmp_path: Path, monkeypatch, sendfile) -> None:
    monkeypatch.setattr(routes, "SENDFILE", sendfile)
    big = BLOB * 16
    digest = hashlib.sha256(big).hexdigest()
    metrics = Metrics(process=False)
    cfg = SwarmDataConfig(max_uploads_per_address=2, upload_stall_s=1.0, min_upload_kb_s=64.0, max_upload_mb_s=0)
    srv, server = serve_store(own_store(tmp_path, {"big.tar": big}), cfg, metrics)
    stop = threading.Event()
    try:
        t0 = time.monotonic()
        stalled = _stalled_reader(srv.address, digest)
        trickling = _trickling_reader(srv.address, digest, 8e3, stop)  # an eighth of the minimum rate
        assert _eventually(lambda: server.uploads == 2)
        assert _eventually(lambda: server.uploads == 0, timeout=8.0)  # far inside upload_deadline_s (900 s)
        assert time.monotonic() - t0 < 6.0
        assert metrics.get("http_refused_total", reason="shard_upload_stalled") == 2
        assert len(get_capped(srv.address, f"/v1/shards/{digest}", len(big), 5.0)) == len(big)  # a reader that reads
        assert metrics.get("http_refused_total", reason="shard_upload_stalled") == 2
    finally:
        stop.set()
        for s in (stalled, trickling):
            s.close()
        srv.close()


def test_lying_sources_are_refused_as_lies(tmp_path: Path) -> None:
    async def too_long(request: web.Request) -> web.Response:
        return web.Response(body=BLOB + b"extra")

    async def wrong_range(request: web.Request) -> web.Response:
        return web.Response(status=206, body=BLOB[:10], headers={"Content-Range": f"bytes 0-9/{len(BLOB)}"})

    for handler, reason in ((too_long, "too_long"), (wrong_range, "bad_range")):
        srv = serve_handler(handler)
        part = tmp_path / reason
        if reason == "bad_range":
            part.write_bytes(BLOB[:100])  # we ask for bytes=100-, it answers from 0
        try:
            with pytest.raises(SourceLied, match=reason):
                _fetch(srv.address, part)
        finally:
            srv.close()


def test_a_source_that_dies_leaves_the_part_for_the_next(tmp_path: Path) -> None:
    srv = serve_handler(dying_handler({DIGEST: BLOB}, 400_000))
    part = tmp_path / "p"
    try:
        with pytest.raises(SourceFailed) as info:
            _fetch(srv.address, part)
        assert not isinstance(info.value, SourceLied)
        assert 0 < part.stat().st_size <= 400_000 and BLOB.startswith(part.read_bytes())
    finally:
        srv.close()
    stop = threading.Event()
    stop.set()
    with pytest.raises(SourceFailed, match="stopped|unreachable"):
        _fetch("127.0.0.1:9", part, stop)


def test_no_store_answers_404(tmp_path: Path) -> None:
    from peer.core.budget_key import NO_BLOCKS
    from peer.net.shard_routes import add_shard_routes
    from tests.unit.shard_server_helpers import Served

    app = web.Application()
    add_shard_routes(app, None, blocks=NO_BLOCKS)
    srv = Served(app)
    try:
        with pytest.raises(SourceFailed, match="http_404"):
            get_capped(srv.address, "/v1/shards", 1000, 5.0)
    finally:
        srv.close()


def test_head_answers_headers_only_and_the_connection_stays_usable(served) -> None:
    import http.client

    srv, _store, metrics = served
    host, port = srv.address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("HEAD", f"/v1/shards/{DIGEST}")
        head = conn.getresponse()
        assert (head.status, head.getheader("Content-Length"), head.read()) == (200, str(len(BLOB)), b"")
        conn.request("GET", f"/v1/shards/{DIGEST}", headers={"Range": "bytes=10-19"})
        part = conn.getresponse()
        assert (part.status, part.getheader("Content-Range"), part.read()) == (206, f"bytes 10-19/{len(BLOB)}", BLOB[10:20])
    finally:
        conn.close()
    assert _eventually(lambda: metrics.get("data_bytes_sent_total") == 10)


def test_a_trickling_server_is_given_up_at_the_deadline() -> None:
    import asyncio

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        for _ in range(1000):
            await response.write(b"x")
            await asyncio.sleep(0.2)
        return response

    srv = serve_handler(trickle)
    try:
        started = time.monotonic()
        with pytest.raises(SourceFailed, match="deadline"):
            get_capped(srv.address, f"/v1/shards/{DIGEST}", 10_000, stall_s=5.0, deadline_s=1.0)
        assert time.monotonic() - started < 3.0  # each byte came within stall_s: only the deadline ends it
    finally:
        srv.close()


def test_a_signed_manifest_is_offered_in_the_advert_and_served_by_its_hash(tmp_path: Path) -> None:
    from peer.shards.advert import signed_offers
    from peer.shards.download import read_advert_doc
    from peer.shards.signed import read_signed_manifest, sign_manifest
    from peer.shards.store import ShardStore
    from protocol import Identity

    plain = own_store(tmp_path / "plain", {"a.tar": BLOB})
    key = Identity.generate(b"\x03" * 32)
    signed = read_signed_manifest(sign_manifest(plain.manifest, key, 4), {key.public_key})
    store = ShardStore(plain.manifest, tmp_path / "cache", 1 << 30, 0.0, own_dir=plain.own_dir, signed=signed)
    store.open()
    metrics = Metrics(process=False)
    srv, _ = serve_store(store, metrics=metrics)
    try:
        offers = signed_offers(read_advert_doc(srv.address, 5.0), key.peer_id)
        assert [(o.hash, o.version) for o in offers] == [(signed.hash, 4)]
        assert get_capped(srv.address, f"/v1/shards/{signed.hash}", 1 << 20, 5.0) == signed.data
    finally:
        srv.close()
    srv, _ = serve_store(plain)
    try:
        assert not signed_offers(read_advert_doc(srv.address, 5.0), key.peer_id)  # an unsigned store offers none
    finally:
        srv.close()
    assert metrics.get("shards_served_total") == 0  # a manifest is not a shard
    with pytest.raises(ValueError, match="another manifest"):
        ShardStore(own_store(tmp_path / "other", {"b.tar": b"b"}).manifest, tmp_path / "c2", 1, 0.0, signed=signed)



def test_the_pacer_lets_a_burst_through_then_keeps_the_rate() -> None:
    pacer = UploadPacer(rate=100.0, burst=50.0, now=0.0)
    assert pacer.delay(50, 0.0) == 0.0  # the burst
    assert pacer.delay(100, 0.0) == pytest.approx(1.0)  # then 100 bytes a second
    assert pacer.delay(100, 0.0) == pytest.approx(2.0)  # a second asker waits behind the first's debt
    assert pacer.delay(10, 10.0) == 0.0  # idle time refills the bucket, never past the burst
    assert pacer.delay(50, 10.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        UploadPacer(0.0, 1.0, 0.0)


def test_uploads_together_keep_under_the_rate_cap(tmp_path: Path) -> None:
    store = own_store(tmp_path, {"a.tar": BLOB})
    metrics = Metrics(process=False)
    srv, server = serve_store(store, SwarmDataConfig(max_upload_mb_s=4.0), metrics)
    try:
        assert server.pacer is not None and server.pacer.burst == routes.SEND_PIECE
        t0 = time.monotonic()
        for i in range(3):
            assert sum(_fetch(srv.address, tmp_path / f"p{i}")) == len(BLOB)
        elapsed = time.monotonic() - t0
    finally:
        srv.close()
    assert elapsed >= (3 * len(BLOB) - routes.SEND_PIECE) / 4e6 * 0.95  # 3 MiB at 4 MB/s after a 1 MiB burst
    uncapped, server = serve_store(store, SwarmDataConfig(max_upload_mb_s=0))
    uncapped.close()
    assert server.pacer is None
