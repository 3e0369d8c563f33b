"""DataLimits in LatentStream: sizes refused before they are read, lying headers, byte budgets, deadlines, stop."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time

import numpy as np
import pytest
from numpy.lib import format as npy_format

from gossip_tts.data import DataLimits, LatentStream, StopRequested, StreamConfig
from gossip_tts.data.tar_stream import TarReader
from gossip_tts.data.tars import npy_bytes
from tests.unit.gossip_tts.data.test_bounded_read import SlowServer
from tests.unit.gossip_tts.data.test_reader import INFO, READER_LOG, members, no_leaked_threads, stream, write_tar  # noqa: F401

KIB = 1 << 10


@pytest.fixture
def read_spy(monkeypatch):
    """Bytes of member bodies the reader read, in order."""
    sizes: list[int] = []
    real = TarReader.read

    def spy(self: TarReader) -> bytes:
        data = real(self)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(TarReader, "read", spy)
    return sizes


def big(frames: int) -> np.ndarray:
    return np.ones((frames, 8), np.float16)


def test_a_sample_over_max_sample_bytes_is_skipped_unread_and_counted(tmp_path, caplog, read_spy):
    write_tar(tmp_path / "x.tar", members("a") + members("huge", latent=big(4000), ref=big(4000)) + members("c"))
    caplog.set_level(logging.WARNING, logger=READER_LOG)
    with stream([tmp_path], limits=DataLimits(max_sample_bytes=100 * KIB)) as s:
        assert [x.key for x in s] == ["a", "c"]
    assert s.stats["skipped_too_large"] == 1 and s.skipped == 1
    assert max(read_spy) < 64 * KIB + 200 and len(read_spy) == 3 + 1 + 3  # huge.npy read, huge.ref.npy not
    assert any("'huge'" in r.getMessage() and "max_sample_bytes limit of 102400" in r.getMessage() for r in caplog.records)


def test_members_a_sample_is_not_made_of_are_never_read(tmp_path, read_spy):
    write_tar(tmp_path / "x.tar", members("a") + [("a.wav", b"\0" * (2 << 20)), ("a.extra.npy", b"\0" * (2 << 20))])
    with stream([tmp_path], limits=DataLimits(max_sample_bytes=64 * KIB)) as s:
        assert [x.key for x in s] == ["a"]
    assert max(read_spy) < 4 * KIB


def test_a_json_over_max_json_bytes_is_skipped_unread(tmp_path):
    padded = members("b", meta=lambda j: {**j, "pad": "x" * 5000})
    write_tar(tmp_path / "x.tar", members("a") + padded)
    with stream([tmp_path], limits=DataLimits(max_json_bytes=4096)) as s:
        assert [x.key for x in s] == ["a"]
    assert s.stats["skipped_too_large"] == 1


def lying_npy() -> bytes:
    buf = io.BytesIO()
    npy_format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (10**12, 8)})
    return buf.getvalue() + b"\0" * 64


def test_an_npy_header_claiming_terabytes_is_refused_before_numpy_allocates(tmp_path):
    write_tar(tmp_path / "x.tar", members("a", latent=lying_npy()) + members("b"))
    with stream([tmp_path]) as s:
        assert [x.key for x in s] == ["b"]
    assert s.stats["skipped_corrupt"] == 1
    with pytest.raises(MemoryError):  # control: what reading it as it stands would do
        np.load(io.BytesIO(lying_npy()))


def test_json_nested_past_the_stack_is_a_bad_sample_not_a_crash(tmp_path):
    items = members("a")[:2] + [("a.json", b"[" * 20_000)] + members("b")
    write_tar(tmp_path / "x.tar", items)
    with stream([tmp_path]) as s:
        assert [x.key for x in s] == ["b"]
    assert s.stats["skipped_corrupt"] == 1
    with pytest.raises(RecursionError):  # control: the error the reader once let through
        json.loads("[" * 20_000)


def test_byte_budgets_smaller_than_any_sample_still_deliver_every_sample_once(tmp_path):
    items = sum((members(f"k{i:02d}", latent=big(5 + i)) for i in range(20)), [])
    write_tar(tmp_path / "x.tar", items)
    limits = DataLimits(prefetch_bytes=1, shuffle_buffer_bytes=1)
    with stream([tmp_path], shuffle_buffer=8, limits=limits) as s:
        assert sorted(x.key for x in s) == [f"k{i:02d}" for i in range(20)]


@pytest.fixture
def silent_shard(tmp_path):
    """An http server that sends a shard's headers and first bytes, then nothing."""
    write_tar(tmp_path / "x.tar", members("a"))
    head = (tmp_path / "x.tar").read_bytes()[:1024]

    def script(conn: socket.socket, closed: threading.Event) -> None:
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 10000000\r\n\r\n" + head)
        closed.wait(30)

    server = SlowServer(script)
    server.url += "/a.tar"
    yield server
    server.close()


def test_a_stop_frees_a_consumer_waiting_on_a_stalled_shard_and_close_cuts_the_read(silent_shard):
    stop = threading.Event()
    s = LatentStream(StreamConfig([silent_shard.url], info=INFO, loop=False, shuffle_buffer=0), interrupt=stop)
    it = iter(s)
    threading.Timer(0.3, stop.set).start()
    with pytest.raises(StopRequested):
        next(it)
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 2
    assert not any(t.name == "latent-stream" for t in threading.enumerate())
    assert s.stats["shard_errors"] == 0  # cutting our own read is no fault of the shard


def test_a_shard_past_its_deadline_is_abandoned_and_counted(silent_shard, caplog):
    caplog.set_level(logging.WARNING, logger=READER_LOG)
    limits = DataLimits(stall_timeout_s=30, shard_deadline_s=0.5)
    t0 = time.monotonic()
    with LatentStream(StreamConfig([silent_shard.url], info=INFO, loop=False, shuffle_buffer=0, limits=limits)) as s:
        assert list(s) == []
    assert time.monotonic() - t0 < 3
    assert s.stats["shard_timeouts"] == 1 and s.stats["shard_errors"] == 1
    assert any("not read within 0.5 s (shard_deadline_s)" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("field, value", [("max_sample_bytes", 0), ("prefetch_bytes", -1), ("bucket_bytes", 1.5),
                                          ("stall_timeout_s", 0), ("shard_deadline_s", -1.0)])
def test_limits_are_validated(field, value):
    with pytest.raises(ValueError, match=field):
        DataLimits(**{field: value})


def test_npy_bytes_round_trip_through_the_checked_loader(tmp_path):
    a = np.arange(24, dtype=np.float16).reshape(3, 8)
    write_tar(tmp_path / "x.tar", members("a", latent=npy_bytes(a)))
    with stream([tmp_path]) as s:
        np.testing.assert_array_equal(next(iter(s)).latent, a.astype(np.float32))
