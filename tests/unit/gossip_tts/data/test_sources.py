"""Shard sources: local folders and files, and http(s) served by a real server on 127.0.0.1."""

from __future__ import annotations

import functools
import socket
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from gossip_tts.data import CodecInfo, DataLimits, LatentSample, LatentStream, ShardWriter, SourceError, StreamConfig, list_shards

INFO = CodecInfo("mel", 4, 86.1328125)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path):
    """A folder served over HTTP on an ephemeral port; yields (folder, base_url)."""
    root = tmp_path / "www"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="test-http", daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert not thread.is_alive()


def write(d: Path, n: int, shard_size: int = 3, prefix: str = "shard") -> list[Path]:
    with ShardWriter(d, INFO, shard_size=shard_size, prefix=prefix) as w:
        for i in range(n):
            w.write(LatentSample(f"{prefix}{i}", np.full((3 + i, 4), i, np.float32), np.ones((2, 4), np.float32),
                                 f"t{i}", "s"))
    return w.paths


def read_keys(sources: list[str], **kw) -> list[str]:
    cfg = StreamConfig(sources, loop=False, shuffle_shards=False, shuffle_buffer=0, **kw)
    with LatentStream(cfg) as s:
        return [x.key for x in s]


def test_local_folder_file_and_list(tmp_path):
    paths = write(tmp_path / "d", 7)
    (tmp_path / "d" / ".hidden.tar").write_bytes(b"")
    (tmp_path / "d" / "notes.txt").write_text("x")
    assert list_shards(str(tmp_path / "d")) == [str(p) for p in paths]
    assert list_shards(str(paths[1])) == [str(paths[1])]
    lst = tmp_path / "d" / "list.txt"
    lst.write_text("# two of them\nshard-000002.tar\n\nshard-000000.tar\n")
    assert list_shards(str(lst)) == [str(paths[2]), str(paths[0])]
    assert list_shards("file://" + str(tmp_path / "d")) == [str(p) for p in paths]
    with pytest.raises(SourceError, match="does not exist"):
        list_shards(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no .tar"):
        list_shards(str(tmp_path / "empty"))


def test_http_directory_index(served):
    root, base = served
    write(root, 7)
    urls = list_shards(base + "/")
    assert urls == [f"{base}/shard-00000{i}.tar" for i in range(3)]
    assert read_keys([base]) == [f"shard{i}" for i in range(7)]


def test_http_shards_txt_and_single_tar(served):
    root, base = served
    write(root / "sub", 7)
    (root / "sub" / "shards.txt").write_text("shard-000001.tar\nshard-000000.tar\n")
    assert list_shards(base + "/sub") == [f"{base}/sub/shard-000001.tar", f"{base}/sub/shard-000000.tar"]
    assert read_keys([base + "/sub/"]) == ["shard3", "shard4", "shard5", "shard0", "shard1", "shard2"]
    assert read_keys([base + "/sub/shard-000002.tar"]) == ["shard6"]
    assert list_shards(base + "/sub/shards.txt") == list_shards(base + "/sub")


def test_http_stream_values_round_trip(served):
    root, base = served
    write(root, 4)
    with LatentStream(StreamConfig([base], loop=False, shuffle_shards=False, shuffle_buffer=0)) as s:
        got = {x.key: x for x in s}
    assert s.stats["shards"] == 2 and s.info == INFO
    np.testing.assert_array_equal(got["shard3"].latent, np.full((6, 4), 3, np.float32))


def test_http_list_refuses_non_http_entries(served):
    root, base = served
    (root / "shards.txt").write_text("file:///etc/passwd\n")
    with pytest.raises(SourceError, match="non-http"):
        list_shards(base)


def test_http_errors_are_clear(served):
    root, base = served
    with pytest.raises(SourceError, match="404") as e:
        list_shards(base + "/missing/shards.txt")
    assert e.value.status == 404
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SourceError, match=f"127.0.0.1:{port}"):
        list_shards(f"http://127.0.0.1:{port}/data/")


def test_http_timeout_is_bounded():
    with socket.socket() as s:  # accepts connections (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        t0 = time.monotonic()
        with pytest.raises(SourceError, match="timed out|cannot reach"):
            list_shards(f"http://127.0.0.1:{s.getsockname()[1]}/x.txt", DataLimits(stall_timeout_s=0.3))
        assert time.monotonic() - t0 < 5


def test_unreachable_shard_mid_stream_is_counted(served, tmp_path):
    root, base = served
    write(root, 3)
    (root / "shards.txt").write_text("shard-000000.tar\ngone.tar\n")
    with LatentStream(StreamConfig([base], loop=False, shuffle_shards=False, shuffle_buffer=0)) as s:
        assert len(list(s)) == 3
    assert s.stats["shard_errors"] == 1
