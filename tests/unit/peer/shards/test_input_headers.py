"""Numbers in HTTP headers, both ways: a source's Content-Length / Content-Range and an asker's Range.

`str.isdigit()` passes "²", which int() refuses, and int() refuses more than 4,300 digits: a
hostile header must be refused as a bad source or a bad request, never escape as a ValueError
(`peer/shards/download.py`, `peer/net/shard_routes.py`).
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import socket
import threading
import time
from pathlib import Path

import pytest

from gossip_tts.apps.swarm_data import load_manifest
from peer.net.shard_routes import RangeNotSatisfiable, parse_range
from peer.shards.download import SourceFailed, SourceLied, fetch_range, get_capped
from tests.unit.shard_server_helpers import own_store, serve_store

BLOB = bytes(range(256)) * 64
DIGEST = hashlib.sha256(BLOB).hexdigest()
HUGE = "9" * 5000
"""Past Python's int() conversion limit of 4,300 digits."""
SERVE_FOR_S = 5.0


class Canned:
    """A server on 127.0.0.1 that answers every request with `answer` and closes, until closed
    or SERVE_FOR_S has passed."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        end = time.monotonic() + SERVE_FOR_S
        while not self._done.is_set() and time.monotonic() < end:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.settimeout(2.0)
                    conn.recv(65536)
                    conn.sendall(self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        self._done.set()
        self.thread.join(SERVE_FOR_S + 2)
        self.sock.close()


def _answer(status: str, headers: dict[str, str], body: bytes = b"x") -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"HTTP/1.1 {status}\r\n{head}Connection: close\r\n\r\n".encode("latin-1") + body


BAD_LENGTHS = ["\u00b2", HUGE, "-1", " 1 2"]


@pytest.mark.parametrize("length", BAD_LENGTHS, ids=["superscript", "huge", "negative", "spaces"])
def test_get_capped_refuses_a_bad_content_length_as_a_bad_source(length: str) -> None:
    srv = Canned(_answer("200 OK", {"Content-Length": length}))
    try:
        with pytest.raises(SourceLied) as info:
            get_capped(srv.address, "/v1/shards", 1000, stall_s=2.0, deadline_s=5.0)
    finally:
        srv.close()
    assert info.value.reason == "bad_length", info.value


@pytest.mark.parametrize("length", BAD_LENGTHS, ids=["superscript", "huge", "negative", "spaces"])
def test_fetch_range_refuses_a_bad_content_length_as_a_lie(length: str, tmp_path: Path) -> None:
    srv = Canned(_answer("200 OK", {"Content-Length": length}))
    try:
        with pytest.raises(SourceLied) as info:
            fetch_range(srv.address, DIGEST, tmp_path / "p", len(BLOB), 2.0, time.monotonic() + 5, threading.Event(),
                        lambda n: None)
    finally:
        srv.close()
    assert info.value.reason == "bad_length", info.value


@pytest.mark.parametrize("content_range", [f"bytes 10-{HUGE}/{len(BLOB)}", f"bytes 10-20/{HUGE}",
                                           "bytes 1\u00b2-20/30"], ids=["huge_end", "huge_size", "superscript"])
def test_fetch_range_refuses_a_bad_content_range_as_a_lie(content_range: str, tmp_path: Path) -> None:
    part = tmp_path / "p"
    part.write_bytes(BLOB[:10])  # so the fetch asks for bytes=10-
    srv = Canned(_answer("206 Partial Content", {"Content-Range": content_range, "Content-Length": "1"}))
    try:
        with pytest.raises(SourceLied) as info:
            fetch_range(srv.address, DIGEST, part, len(BLOB), 2.0, time.monotonic() + 5, threading.Event(),
                        lambda n: None)
    finally:
        srv.close()
    assert info.value.reason == "bad_range", info.value


def test_one_hostile_peer_does_not_abort_loading_the_manifest() -> None:
    srv = Canned(_answer("200 OK", {"Content-Length": HUGE}))
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt, match="stopped while waiting"):  # it kept asking until stopped
            load_manifest("ab" * 32, None, [srv.address], stop, lambda line: None)
    finally:
        timer.cancel()
        srv.close()


def test_parse_range_refuses_numbers_past_any_file_size() -> None:
    for header in (f"bytes=-{HUGE}", f"bytes={HUGE}-", f"bytes=0-{HUGE}"):
        with pytest.raises(RangeNotSatisfiable):
            parse_range(header, 100)
    assert parse_range("bytes=\u0663-", 100) is None  # not ASCII digits: not a range we read; the whole file


def test_a_huge_range_is_answered_416_without_a_traceback(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    srv, _server = serve_store(own_store(tmp_path, {"a.tar": BLOB}))
    host, port = srv.address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        with caplog.at_level(logging.ERROR):
            conn.request("GET", f"/v1/shards/{DIGEST}", headers={"Range": f"bytes=-{HUGE}"})
            resp = conn.getresponse()
            resp.read()
    finally:
        conn.close()
        srv.close()
    assert resp.status == 416
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
