"""Reading http(s) shards under a stall timeout and a deadline, and cutting a stuck read from another thread."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from gossip_tts.data import DataLimits, SourceError, list_shards, open_shard
from gossip_tts.data.bounded_read import BoundedReader, OpenReads, Watchdog
from gossip_tts.data.errors import SourceAborted, SourceTimeout
from gossip_tts.data.http_get import http_get


class SlowServer:
    """A raw TCP server on 127.0.0.1 answering every connection with `script(conn)` in a thread."""

    def __init__(self, script) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.closed = threading.Event()
        self.script = script
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                self.script(conn, self.closed)
            except OSError:
                pass

    def close(self) -> None:
        self.closed.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def server():
    made: list[SlowServer] = []

    def make(script) -> SlowServer:
        made.append(SlowServer(script))
        return made[-1]

    yield make
    for s in made:
        s.close()


HEAD = b"HTTP/1.0 200 OK\r\nContent-Length: 1000000\r\n\r\n"


def drip_body(every_s: float):
    def script(conn: socket.socket, closed: threading.Event) -> None:
        conn.sendall(HEAD)
        while not closed.wait(every_s):
            conn.sendall(b"x")
    return script


def silent_after_headers(conn: socket.socket, closed: threading.Event) -> None:
    conn.sendall(HEAD)
    closed.wait(30)


def drip_headers(conn: socket.socket, closed: threading.Event) -> None:
    for byte in HEAD:
        if closed.wait(0.1):
            return
        conn.sendall(bytes([byte]))
    closed.wait(30)


def read_in_thread(body: BoundedReader, n: int) -> tuple[threading.Thread, list[BaseException]]:
    """A read of `body` started in a thread, and the SourceErrors it ends with."""
    errors: list[BaseException] = []

    def read() -> None:
        try:
            body.read(n)
        except SourceError as e:
            errors.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, errors


def read_all(limits: DataLimits, url: str) -> float:
    t0 = time.monotonic()
    with open_shard(url, limits) as body:
        while body.read(65536):
            pass
    return time.monotonic() - t0


def test_a_server_that_goes_silent_trips_the_stall_timeout(server):
    s = server(silent_after_headers)
    t0 = time.monotonic()
    with pytest.raises(SourceTimeout, match=r"no data for 0.3 s \(stall_timeout_s\)"):
        read_all(DataLimits(stall_timeout_s=0.3), s.url + "/a.tar")
    assert time.monotonic() - t0 < 3


@pytest.mark.parametrize("script", [drip_body(0.05), drip_headers], ids=["body", "headers"])
def test_a_server_that_drips_forever_is_cut_at_the_deadline(server, script):
    s = server(script)
    t0 = time.monotonic()
    with pytest.raises(SourceTimeout, match=r"not read within 1 s \(shard_deadline_s\)"):
        read_all(DataLimits(stall_timeout_s=5, shard_deadline_s=1), s.url + "/a.tar")
    assert time.monotonic() - t0 < 3


def test_control_without_the_deadline_a_dripping_body_holds_the_reader(server):
    s = server(drip_body(0.05))
    body = open_shard(s.url + "/a.tar", DataLimits(stall_timeout_s=5, shard_deadline_s=1e9))
    reader, errors = read_in_thread(body, 1_000_000)
    reader.join(2)
    assert reader.is_alive()  # two seconds in, the stall timeout never tripped: each byte came in time
    body.abort()
    reader.join(2)
    assert not reader.is_alive() and isinstance(errors[0], SourceAborted)
    body.close()


def test_abort_from_another_thread_ends_a_stuck_read_at_once(server):
    s = server(silent_after_headers)
    reads = OpenReads()
    body = open_shard(s.url + "/a.tar", DataLimits(stall_timeout_s=30), reads)
    reader, errors = read_in_thread(body, 10)
    time.sleep(0.2)
    t0 = time.monotonic()
    reads.abort_all()
    reader.join(2)
    assert not reader.is_alive() and time.monotonic() - t0 < 1
    assert isinstance(errors[0], SourceAborted)
    with pytest.raises(SourceAborted):  # a read opened after the abort is cut as it starts
        open_shard(s.url + "/b.tar", DataLimits(stall_timeout_s=30), reads).read(1)
    body.close()


def test_a_listing_that_drips_is_cut_too(server):
    s = server(drip_body(0.05))
    with pytest.raises(SourceTimeout, match="not read within 0.5 s"):
        list_shards(s.url + "/shards.txt", DataLimits(stall_timeout_s=5, shard_deadline_s=0.5))


def test_redirects_are_followed_only_to_http(server):
    target = server(lambda conn, closed: conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    hop = server(lambda conn, closed: conn.sendall(f"HTTP/1.0 302 Found\r\nLocation: {target.url}/x.tar\r\n\r\n".encode()))
    with http_get(hop.url + "/a.tar", 5, 5) as body:
        assert body.read(10) == b"ok"
    to_file = server(lambda conn, closed: conn.sendall(b"HTTP/1.0 302 Found\r\nLocation: file:///etc/passwd\r\n\r\n"))
    with pytest.raises(SourceError, match="only http"):
        http_get(to_file.url + "/a.tar", 5, 5)


def test_time_waiting_for_the_consumer_is_not_counted():
    watchdog = Watchdog("x", deadline_s=0.3, stall_s=1)
    watchdog.pause()
    time.sleep(0.5)
    watchdog.resume()
    watchdog.check()  # paused time left out
    time.sleep(0.4)
    with pytest.raises(SourceTimeout):
        watchdog.check()
    watchdog.close()
