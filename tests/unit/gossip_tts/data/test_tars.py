"""ShardWriter: round trip through the reader, shard header, atomic and reproducible shards."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import numpy as np
import pytest

from gossip_tts.data import CodecInfo, LatentSample, LatentStream, ShardWriter, StreamConfig
from gossip_tts.data.tars import SHARD_INFO_NAME

INFO = CodecInfo("mel", 8, 86.1328125)


def make_sample(i: int, frames: int | None = None, dim: int = 8, seed: int = 0) -> LatentSample:
    rng = np.random.default_rng([seed, i])
    t = frames if frames is not None else 5 + i
    return LatentSample(
        key=f"s{i:04d}",
        latent=rng.standard_normal((t, dim)).astype(np.float32),
        ref=rng.standard_normal((3 + i % 4, dim)).astype(np.float32),
        text=f"sample number {i} – ünïcode",
        speaker=f"spk{i % 3}",
        meta={"source": "unit", "index": i},
    )


def read_all(path) -> list[LatentSample]:
    with LatentStream(StreamConfig([str(path)], loop=False, shuffle_shards=False, shuffle_buffer=0)) as s:
        return list(s)


def test_round_trip_equal_to_float16_and_fields_intact(tmp_path):
    samples = [make_sample(i) for i in range(7)]
    with ShardWriter(tmp_path, INFO, shard_size=3) as w:
        for s in samples:
            w.write(s)
    paths = w.close()
    assert [p.name for p in paths] == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    got = read_all(tmp_path)
    assert [g.key for g in got] == [s.key for s in samples]
    for s, g in zip(samples, got):
        assert g.latent.dtype == np.float32 and g.ref.dtype == np.float32
        np.testing.assert_array_equal(g.latent, s.latent.astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(g.ref, s.ref.astype(np.float16).astype(np.float32))
        assert np.abs(g.latent - s.latent).max() < 2e-3 * max(1.0, np.abs(s.latent).max())
        assert (g.text, g.speaker) == (s.text, s.speaker)
        assert g.meta["source"] == "unit" and g.meta["index"] == s.meta["index"]
        assert g.meta["target_duration"] == pytest.approx(s.frames / INFO.frame_rate)
        assert (g.meta["codec"], g.meta["latent_dim"], g.meta["frame_rate"]) == ("mel", 8, INFO.frame_rate)


def test_shard_header_is_first_member_and_records_info_and_count(tmp_path):
    with ShardWriter(tmp_path, INFO, shard_size=4) as w:
        for i in range(6):
            w.write(make_sample(i))
    counts = []
    for p in w.paths:
        with tarfile.open(p) as tf:
            names = tf.getnames()
            assert names[0] == SHARD_INFO_NAME
            head = json.loads(tf.extractfile(names[0]).read())
            assert (head["codec"], head["latent_dim"], head["frame_rate"]) == ("mel", 8, INFO.frame_rate)
            counts.append(head["samples"])
            assert names[1:4] == ["s%04d.npy" % (4 * len(counts) - 4), "s%04d.ref.npy" % (4 * len(counts) - 4),
                                  "s%04d.json" % (4 * len(counts) - 4)]
            arr = np.load(io.BytesIO(tf.extractfile(names[1]).read()), allow_pickle=False)
            assert arr.dtype == np.float16
    assert counts == [4, 2]


def test_shards_are_reproducible_and_no_temp_files_remain(tmp_path):
    digests = []
    for d in ("a", "b"):
        with ShardWriter(tmp_path / d, INFO, shard_size=2) as w:
            for i in range(3):
                w.write(make_sample(i))
        digests.append([hashlib.sha256(p.read_bytes()).hexdigest() for p in w.paths])
        assert sorted(x.name for x in (tmp_path / d).iterdir()) == ["shard-000000.tar", "shard-000001.tar"]
    assert digests[0] == digests[1]


def test_exception_drops_unfinished_shard_only(tmp_path):
    with pytest.raises(RuntimeError):
        with ShardWriter(tmp_path, INFO, shard_size=2) as w:
            for i in range(3):
                w.write(make_sample(i))
            raise RuntimeError("boom")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["shard-000000.tar"]
    assert [s.key for s in read_all(tmp_path)] == ["s0000", "s0001"]


@pytest.mark.parametrize(
    "bad",
    [
        lambda s: setattr(s, "latent", s.latent[:, :4]),  # wrong dim
        lambda s: s.latent.__setitem__((0, 0), np.nan),  # NaN
        lambda s: s.latent.__setitem__((0, 0), 1e6),  # beyond float16
        lambda s: setattr(s, "ref", np.zeros((0, 8), np.float32)),  # empty ref
        lambda s: setattr(s, "key", "has.dot"),
        lambda s: setattr(s, "key", "__shard__"),
        lambda s: s.meta.__setitem__("codec", "dac"),  # contradicts the writer
        lambda s: s.meta.__setitem__("obj", object()),  # not JSON
    ],
)
def test_writer_refuses_bad_samples_and_writes_nothing(tmp_path, bad):
    s = make_sample(1)
    bad(s)
    with ShardWriter(tmp_path, INFO) as w:
        with pytest.raises(ValueError):
            w.write(s)
        w.write(make_sample(2))
    assert [g.key for g in read_all(tmp_path)] == ["s0002"]


def test_writer_refuses_duplicate_key_and_bad_info(tmp_path):
    with ShardWriter(tmp_path, INFO) as w:
        w.write(make_sample(1))
        with pytest.raises(ValueError, match="duplicate"):
            w.write(make_sample(1))
    with pytest.raises(ValueError):
        ShardWriter(tmp_path, CodecInfo("mel", 0, 86.0))
    with pytest.raises(ValueError):
        ShardWriter(tmp_path, CodecInfo("", 8, 86.0))
    with pytest.raises(ValueError):
        ShardWriter(tmp_path, INFO, shard_size=0)
