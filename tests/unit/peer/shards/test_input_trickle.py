"""A shard source that trickles its status line or headers is cut off at the deadline, or at `stop`.

A byte every fraction of `stall_s` never trips the socket timeout, and http.client waits for a
64 KiB line and 100 header lines: only a deadline over the whole request ends it
(`peer/shards/download.py`).
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from peer.shards.download import SourceFailed, fetch_range, get_capped

TRICKLE_FOR_S = 4.0
"""The trickler gives up by itself after this long, so a client that never cuts it still ends."""
DIGEST = "ab" * 32


class Trickler:
    """A server on 127.0.0.1 that answers one request with `prefix`, then one byte of `drip`
    every `every_s`, until the client goes away or TRICKLE_FOR_S has passed."""

    def __init__(self, prefix: bytes, drip: bytes, every_s: float = 0.1) -> None:
        self.prefix, self.drip, self.every_s = prefix, drip, every_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(TRICKLE_FOR_S)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(TRICKLE_FOR_S)
            try:
                conn.recv(65536)  # the request
                conn.sendall(self.prefix)
                end = time.monotonic() + TRICKLE_FOR_S
                i = 0
                while time.monotonic() < end:
                    conn.sendall(self.drip[i % len(self.drip):][:1])
                    i += 1
                    time.sleep(self.every_s)
            except OSError:  # the client cut us off
                return

    def close(self) -> None:
        self.sock.close()
        self.thread.join(TRICKLE_FOR_S + 2)


@pytest.fixture(params=["status_line", "header_line", "many_headers"])
def trickler(request):
    prefix, drip = {
        "status_line": (b"HTTP/1.1 200 ", b"O"),
        "header_line": (b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a"),
        "many_headers": (b"HTTP/1.1 200 OK\r\n", b"X: 1\r\n"),
    }[request.param]
    t = Trickler(prefix, drip)
    yield t
    t.close()


def test_get_capped_gives_up_on_trickled_headers_at_the_deadline(trickler: Trickler) -> None:
    started = time.monotonic()
    with pytest.raises(SourceFailed) as info:
        get_capped(trickler.address, "/v1/shards", 1000, stall_s=1.0, deadline_s=1.0)
    took = time.monotonic() - started
    assert info.value.reason == "deadline", info.value
    assert took < 3.0, f"held {took:.1f} s by a source trickling its headers, past a 1 s deadline"  # unbounded: 4 s and more


def test_fetch_range_gives_up_on_trickled_headers_at_the_deadline(trickler: Trickler, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(SourceFailed) as info:
        fetch_range(trickler.address, DIGEST, tmp_path / "p", 100, 1.0, time.monotonic() + 1.0, threading.Event(),
                    lambda n: None)
    took = time.monotonic() - started
    assert info.value.reason == "deadline", info.value
    assert took < 3.0, f"held {took:.1f} s by a source trickling its headers, past a 1 s deadline"  # unbounded: 4 s and more


@contextmanager
def stop_after(seconds: float) -> Iterator[threading.Event]:
    """An event set `seconds` from now (as a stopping peer sets its stop flag); cancelled on leaving."""
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    try:
        yield stop
    finally:
        timer.cancel()


def test_fetch_range_is_cut_by_stop_while_headers_trickle(trickler: Trickler, tmp_path: Path) -> None:
    started = time.monotonic()
    with stop_after(0.5) as stop, pytest.raises(SourceFailed) as info:
        fetch_range(trickler.address, DIGEST, tmp_path / "p", 100, 1.0, time.monotonic() + 30.0, stop, lambda n: None)
    took = time.monotonic() - started
    assert info.value.reason == "stopped", info.value
    assert took < 3.0, f"stop came at 0.5 s but the fetch held on for {took:.1f} s"  # unbounded: 4 s and more


def test_fetch_range_is_cut_by_stop_while_the_body_trickles(tmp_path: Path) -> None:
    t = Trickler(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"x", every_s=0.5)
    started = time.monotonic()
    try:
        with stop_after(0.3) as stop, pytest.raises(SourceFailed) as info:
            fetch_range(t.address, DIGEST, tmp_path / "p", 100, 5.0, time.monotonic() + 30.0, stop, lambda n: None)
    finally:
        t.close()
    assert info.value.reason == "stopped", info.value
    assert time.monotonic() - started < 4.0  # unbounded: the 100-byte body trickles for 50 s


def test_closing_the_fetcher_cuts_an_advert_read_that_trickles(tmp_path: Path) -> None:
    """The planning thread waits for every advert it asked for; closing the fetcher must not wait
    for a neighbour that trickles its headers (ADVERT_DEADLINE_S is 30 s)."""
    from peer.metrics import Metrics
    from peer.shards.config import SwarmDataConfig
    from peer.shards.fetcher import ShardFetcher
    from peer.shards.store import ShardStore
    from tests.unit.shard_server_helpers import manifest_of

    t = Trickler(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a", every_s=0.1)
    store = ShardStore(manifest_of({"a.tar": b"x" * 1000}), tmp_path / "cache", 1 << 20, min_hold_s=0.0)
    store.open()
    fetcher = ShardFetcher(store, SwarmDataConfig(advert_every_s=0.01, stall_timeout_s=2.0), "me",
                           lambda: [t.address], Metrics(process=False))
    planning = threading.Thread(target=fetcher._refresh_adverts, args=(time.monotonic(),), daemon=True)
    try:
        planning.start()
        time.sleep(0.5)  # the advert read is under way, its headers trickling
        started = time.monotonic()
        fetcher.close()
        planning.join(5.0)
        took = time.monotonic() - started
    finally:
        t.close()
    assert not planning.is_alive()
    assert took < 2.5, f"close waited {took:.1f} s for a trickling advert"  # unbounded: until the trickle ends (3.5 s)


def test_stopping_while_the_manifest_trickles_in_ends_the_wait_at_once() -> None:
    """Ctrl+C while a peer trickles the manifest's headers: start-up ends now, not at the
    read's 60 s deadline."""
    from gossip_tts.apps.swarm_data import load_manifest

    t = Trickler(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a", every_s=0.1)
    started = time.monotonic()
    try:
        with stop_after(0.3) as stop, pytest.raises(KeyboardInterrupt):
            load_manifest(DIGEST, None, [t.address], stop, lambda line: None)
    finally:
        t.close()
    took = time.monotonic() - started
    assert took < 2.5, f"stopped at 0.3 s, start-up waited {took:.1f} s"  # unbounded: until the trickle ends (4 s)
