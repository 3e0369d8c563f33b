"""LatentStream: skipping bad data by reason, refusing foreign shards, order, prefetch thread."""

from __future__ import annotations

import io
import itertools
import json
import logging
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from gossip_tts.data import (
    CodecInfo,
    EmptyStreamError,
    LatentSample,
    LatentStream,
    ShardMismatchError,
    ShardWriter,
    StreamConfig,
)
from gossip_tts.data.tars import npy_bytes

INFO = CodecInfo("mel", 8, 86.1328125)
READER_LOG = "gossip_tts.data.reader"


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not extra:
            return
        time.sleep(0.02)
    pytest.fail(f"leaked threads: {extra}")


def make_sample(i: int, frames: int = 6, dim: int = 8) -> LatentSample:
    rng = np.random.default_rng(i)
    return LatentSample(f"k{i:04d}", rng.standard_normal((frames, dim)).astype(np.float32),
                        rng.standard_normal((4, dim)).astype(np.float32), f"text {i}", "spk")


def write_shards(d: Path, n: int, shard_size: int = 4, info: CodecInfo = INFO, start: int = 0) -> list[Path]:
    with ShardWriter(d, info, shard_size=shard_size) as w:
        for i in range(start, start + n):
            w.write(make_sample(i, dim=info.latent_dim))
    return w.paths


OMIT = object()


def members(key: str, latent=None, ref=None, meta=None) -> list[tuple[str, bytes]]:
    """The three members of one sample; pass OMIT to leave a member out."""
    latent = np.ones((5, 8), np.float16) if latent is None else latent
    ref = np.ones((3, 8), np.float16) if ref is None else ref
    js = {"text": "hi", "target_duration": 5 / INFO.frame_rate, "speaker": "s",
          "codec": INFO.codec, "latent_dim": INFO.latent_dim, "frame_rate": INFO.frame_rate}
    if meta is not None:
        js = meta(js)
    out = []
    for name, data in ((f"{key}.npy", latent), (f"{key}.ref.npy", ref), (f"{key}.json", js)):
        if data is OMIT:
            continue
        if isinstance(data, np.ndarray):
            data = npy_bytes(data)
        elif isinstance(data, dict):
            data = json.dumps(data).encode()
        out.append((name, data))
    return out


def pickled_npy() -> bytes:
    """An .npy of Python objects: loading it would unpickle, which the reader must refuse."""
    buf = io.BytesIO()
    np.save(buf, np.array([[{"a": 1}]], dtype=object), allow_pickle=True)
    return buf.getvalue()


def write_tar(path: Path, items: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tf:
        for name, data in items:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return path


def stream(sources, **kw) -> LatentStream:
    kw.setdefault("loop", False)
    kw.setdefault("shuffle_shards", False)
    kw.setdefault("shuffle_buffer", 0)
    return LatentStream(StreamConfig([str(s) for s in sources], **kw))


def test_bad_members_are_skipped_counted_by_reason_and_logged_once(tmp_path, caplog):
    nan = np.ones((5, 8), np.float16)
    nan[2, 3] = np.nan
    good_npy = npy_bytes(np.ones((5, 8), np.float16))
    items = (
        members("good0")
        + members("trunc", latent=good_npy[: len(good_npy) - 7])  # truncated npy
        + members("garbage", ref=b"\x93NUMPY garbage \x00\xff" * 3)  # garbage bytes
        + members("nan", latent=nan)  # NaN latent
        + members("notext", meta=lambda j: {k: v for k, v in j.items() if k != "text"})
        + members("noref", ref=OMIT)  # a whole member missing
        + members("badjson", meta=lambda j: None)[:2] + [("badjson.json", b"{not json")]
        + members("pickled", latent=pickled_npy())
        + members("good1")
    )
    write_tar(tmp_path / "a.tar", items)
    caplog.set_level(logging.WARNING, logger=READER_LOG)
    with stream([tmp_path], loop=True) as s:
        it = iter(s)
        got = [next(it).key for _ in range(6)]  # three passes over the two good samples
    assert got == ["good0", "good1"] * 3
    assert s.stats["skipped_corrupt"] >= 2 * 4  # trunc, garbage, badjson, pickled (pass 3 may be partial)
    assert s.stats["skipped_nonfinite"] >= 2 and s.stats["skipped_missing_field"] >= 2 * 2
    per_key = {k: sum(k in r.getMessage() for r in caplog.records)
               for k in ("trunc", "garbage", "nan", "notext", "noref", "badjson", "pickled")}
    assert per_key == dict.fromkeys(per_key, 1), per_key
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    assert "a.tar" in caplog.records[0].getMessage()


def test_skip_reasons_exact_counts_one_pass(tmp_path):
    nan = np.ones((5, 8), np.float32)
    nan[0, 0] = np.inf
    items = (members("a") + members("b", latent=b"rubbish") + members("c", ref=nan)
             + members("d", meta=lambda j: {k: v for k, v in j.items() if k != "text"}) + members("e"))
    write_tar(tmp_path / "x.tar", items)
    with stream([tmp_path]) as s:
        assert [x.key for x in s] == ["a", "e"]
    assert {k: s.stats[k] for k in ("samples", "skipped_corrupt", "skipped_nonfinite", "skipped_missing_field")} == {
        "samples": 2, "skipped_corrupt": 1, "skipped_nonfinite": 1, "skipped_missing_field": 1}


def test_truncated_tar_keeps_the_samples_before_the_cut(tmp_path, caplog):
    paths = write_shards(tmp_path / "src", 5, shard_size=5)
    data = paths[0].read_bytes()
    (tmp_path / "cut").mkdir()
    cut = tmp_path / "cut" / "cut.tar"
    with tarfile.open(paths[0]) as tf:  # cut inside the data of the last sample's latent
        last = [m for m in tf.getmembers() if m.name == "k0004.npy"][0]
    cut.write_bytes(data[: last.offset_data + 40])
    caplog.set_level(logging.WARNING, logger=READER_LOG)
    with stream([cut.parent]) as s:
        keys = [x.key for x in s]
    assert keys == ["k0000", "k0001", "k0002", "k0003"]
    assert s.stats["shard_errors"] == 1 and s.stats["skipped_corrupt"] == 1
    assert any("cut.tar" in r.getMessage() for r in caplog.records)


def test_not_a_tar_and_missing_shard_are_counted_not_fatal(tmp_path):
    write_shards(tmp_path, 3, shard_size=3)
    (tmp_path / "zz.tar").write_bytes(b"this is not a tar at all" * 50)
    with stream([tmp_path]) as s:
        assert len(list(s)) == 3
    assert s.stats["shard_errors"] == 1 and s.stats["shards"] == 1


@pytest.mark.parametrize(
    "other, expect",
    [(CodecInfo("dac", 8, INFO.frame_rate), ("codec 'dac'", "codec 'mel'")),
     (CodecInfo("mel", 16, INFO.frame_rate), ("latent_dim 16", "latent_dim 8")),
     (CodecInfo("mel", 8, 50.0), ("frame_rate 50", "frame_rate 86.13"))],
)
def test_foreign_shard_is_refused_naming_both(tmp_path, other, expect):
    write_shards(tmp_path / "d", 2, info=other)
    with stream([tmp_path / "d"], info=INFO) as s, pytest.raises(ShardMismatchError) as e:
        list(s)
    msg = str(e.value)
    assert all(x in msg for x in expect) and "shard-000000.tar" in msg
    assert s.stats["samples"] == 0  # refused from the header, before any sample
    assert isinstance(e.value, ValueError)


def test_info_taken_from_first_shard_then_enforced(tmp_path):
    write_shards(tmp_path / "d", 3, start=0)
    write_shards(tmp_path / "d2", 3, info=CodecInfo("dac", 8, INFO.frame_rate))
    with stream([tmp_path / "d", tmp_path / "d2"]) as s:
        it = iter(s)
        assert next(it).key == "k0000"
        assert s.info == INFO
        with pytest.raises(ShardMismatchError, match="'dac'.*'mel'"):
            list(it)


def test_sample_json_mismatch_refused_even_without_shard_header(tmp_path):
    items = members("a") + members("b", meta=lambda j: {**j, "codec": "dac"})
    write_tar(tmp_path / "x.tar", items)
    with stream([tmp_path], info=INFO) as s, pytest.raises(ShardMismatchError, match="'b'"):
        list(s)


def test_loop_false_ends_after_one_pass_and_loop_true_repeats(tmp_path):
    write_shards(tmp_path, 10, shard_size=3)
    with stream([tmp_path]) as s:
        assert len(list(itertools.islice(s, 100))) == 10
    with stream([tmp_path], loop=True, shuffle_shards=True, shuffle_buffer=4) as s:
        it = iter(s)
        keys = [next(it).key for _ in range(35)]
    assert len(set(keys)) == 10 and s.stats["samples"] >= 35


def test_order_depends_on_seed_only(tmp_path):
    write_shards(tmp_path, 24, shard_size=3)

    def order(seed):
        with stream([tmp_path], seed=seed, shuffle_shards=True, shuffle_buffer=8) as s:
            return [x.key for x in s]

    a, b, c = order(1), order(1), order(2)
    assert a == b and a != c
    assert sorted(a) == sorted(c) == [f"k{i:04d}" for i in range(24)]
    assert a != sorted(a)


def test_close_stops_prefetch_thread_midway(tmp_path):
    write_shards(tmp_path, 40, shard_size=10)
    s = stream([tmp_path], loop=True, prefetch=2)
    it = iter(s)
    next(it)
    time.sleep(0.05)  # let the producer block on the full queue
    assert any(t.name == "latent-stream" for t in threading.enumerate())
    s.close()
    assert not any(t.name == "latent-stream" for t in threading.enumerate())
    with stream([tmp_path], loop=True, prefetch=2) as s2:  # __exit__ closes too
        next(iter(s2))
    for x in stream([tmp_path], loop=True):  # leaving a for loop closes the generator
        break


def test_whole_pass_without_samples_raises_instead_of_spinning(tmp_path):
    write_tar(tmp_path / "x.tar", members("a", latent=b"junk"))
    with stream([tmp_path], loop=True) as s, pytest.raises(EmptyStreamError):
        list(s)
    with stream([tmp_path], loop=False) as s:
        assert list(s) == []


def test_config_validation():
    with pytest.raises(ValueError):
        StreamConfig([])
    with pytest.raises(ValueError):
        StreamConfig(["x"], prefetch=0)
    with pytest.raises(ValueError):
        StreamConfig(["x"], shuffle_buffer=-1)
    with pytest.raises(ValueError):
        StreamConfig(["x"], info=CodecInfo("mel", -1, 86.0))
    assert StreamConfig("a/dir").sources == ["a/dir"]


def test_the_latent_space_is_logged_in_words(tmp_path, caplog):
    from gossip_tts.data import ensure_builtin_corpus

    train, _ = ensure_builtin_corpus(tmp_path / "c", n_speakers=1, clips_per_speaker=2, val_clips_per_speaker=1)
    caplog.set_level(logging.INFO, logger=READER_LOG)
    with LatentStream(StreamConfig(sources=[str(train)], loop=False)) as stream:
        next(iter(stream))
    lines = [r.getMessage() for r in caplog.records if "latent space taken" in r.getMessage()]
    assert len(lines) == 1 and lines[0].endswith(": codec mel, 128 dims at 86.13 frames/s"), lines
