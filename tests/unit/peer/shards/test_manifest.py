"""The swarm manifest: canonical bytes, a stable hash, strict parsing, and `pack`/`manifest` writing it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gossip_tts.cli.main import main
from gossip_tts.data import CodecInfo, LatentSample, ShardWriter
from gossip_tts.data.swarm_manifest import build_manifest, write_manifest
from peer.shards import manifest as mf
from peer.shards.store import sha256_of
from peer.shards.manifest import Manifest, ManifestError, ShardEntry, parse_swarm_id, read_manifest

A = ShardEntry(name="a-000000.tar", size=10240, sha256="11" * 32, codec="mel", latent_dim=128,
               frame_rate=86.1328125, samples=3, audio_seconds=7.5)
B = ShardEntry(name="a-000001.tar", size=20480, sha256="22" * 32, codec="mel", latent_dim=128,
               frame_rate=86.1328125, samples=4, audio_seconds=9.25)
CANONICAL = (
    b'{"format":"gossip-tts-swarm-manifest-v1","shards":['
    b'{"audio_seconds":7.5,"codec":"mel","frame_rate":86.1328125,"latent_dim":128,"name":"a-000000.tar",'
    b'"samples":3,"sha256":"' + b"11" * 32 + b'","size":10240},'
    b'{"audio_seconds":9.25,"codec":"mel","frame_rate":86.1328125,"latent_dim":128,"name":"a-000001.tar",'
    b'"samples":4,"sha256":"' + b"22" * 32 + b'","size":20480}]}'
)


def test_canonical_bytes_and_hash_are_exact_and_order_free() -> None:
    m = Manifest((B, A))  # listed out of order: sorted by name
    assert m.canonical_bytes() == CANONICAL
    assert m.hash == hashlib.sha256(CANONICAL).hexdigest()
    assert m.hash == "b16fd622fdfd05edd247edd4e09e94fa0e5dcc5822f0a4938d350a0ad435abfd"  # pinned: the id must never drift
    assert m.hash == Manifest((A, B)).hash and m.swarm_id == "swarm:" + m.hash
    assert m.total_bytes == 30720 and set(m.by_hash()) == {"11" * 32, "22" * 32}


def test_read_back_checks_hash_before_use() -> None:
    m = read_manifest(CANONICAL, expected_hash=hashlib.sha256(CANONICAL).hexdigest())
    assert m.shards == (A, B)
    tampered = CANONICAL.replace(b'"size":10240', b'"size":10241')
    with pytest.raises(ManifestError, match="hashes to .* not to the expected"):
        read_manifest(tampered, expected_hash=hashlib.sha256(CANONICAL).hexdigest())
    assert read_manifest(tampered).shards[0].size == 10241  # without a hash it is just another manifest


def test_non_canonical_bytes_are_refused() -> None:
    spaced = json.dumps(json.loads(CANONICAL), sort_keys=True).encode()
    with pytest.raises(ManifestError, match="canonical"):
        read_manifest(spaced)
    swapped = json.dumps({"shards": json.loads(CANONICAL)["shards"][::-1], "format": mf.FORMAT},
                         separators=(",", ":"), sort_keys=True).encode()
    with pytest.raises(ManifestError, match="canonical"):
        read_manifest(swapped)


def _doc(**shard_changes: object) -> dict:
    doc = json.loads(CANONICAL)
    doc["shards"][0].update(shard_changes)
    return doc


@pytest.mark.parametrize("doc, match", [
    ({**json.loads(CANONICAL), "extra": 1}, "unknown field.*'extra'"),
    (_doc(url="http://x/a.tar"), "shard 0 has unknown field.*'url'"),
    ({"format": mf.FORMAT}, "lacks field.*'shards'"),
    ({**json.loads(CANONICAL), "format": "v0"}, "format is 'v0'"),
    ({"format": mf.FORMAT, "shards": []}, "no shard"),
    (_doc(name="../etc/passwd.tar"), "not a plain file name"),
    (_doc(name=".hidden.tar"), "not a plain file name"),
    (_doc(name="a.zip"), "not a plain file name"),
    (_doc(size=0), "size must be an integer in 1"),
    (_doc(size=True), "size must be an integer"),
    (_doc(size=mf.MAX_SHARD_BYTES + 1), "size must be an integer"),
    (_doc(sha256="AB" * 32), "sha256 must be 64 lowercase hex"),
    (_doc(frame_rate=0), "frame_rate must be a finite number > 0"),
    (_doc(audio_seconds=-1), "audio_seconds must be a finite number >= 0"),
    (_doc(latent_dim=64), "one latent space"),
    (_doc(codec=""), "codec must be a string"),
    (_doc(name="a-000001.tar"), "shard name twice"),
    (_doc(sha256="22" * 32), "shard sha256 twice"),
])
def test_bad_manifests_are_refused(doc: dict, match: str) -> None:
    with pytest.raises(ManifestError, match=match):
        read_manifest(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


def test_size_limits_and_non_json() -> None:
    with pytest.raises(ManifestError, match="over the limit"):
        read_manifest(b" " * (mf.MAX_MANIFEST_BYTES + 1))
    with pytest.raises(ManifestError, match="not JSON"):
        read_manifest(b"\xff{")
    with pytest.raises(ManifestError, match="NaN"):
        read_manifest(CANONICAL.replace(b"7.5", b"NaN"))
    many = {"format": mf.FORMAT, "shards": [A.to_dict()] * (mf.MAX_SHARDS + 1)}
    with pytest.raises(ManifestError, match="over the limit of 65536"):
        mf.manifest_from_dict(many)


def test_swarm_ids() -> None:
    assert parse_swarm_id("swarm:" + "ab" * 32) == "ab" * 32
    for bad in ("ab" * 32, "swarm:" + "AB" * 32, "swarm:abc", "swarm:" + "ab" * 33):
        with pytest.raises(ManifestError):
            parse_swarm_id(bad)


def _write_tars(out: Path, n_shards: int, per_shard: int = 2) -> list[Path]:
    info = CodecInfo(codec="mel", latent_dim=4, frame_rate=10.0)
    rng = np.random.default_rng(0)
    with ShardWriter(out, info, shard_size=per_shard, prefix="t") as w:
        for i in range(n_shards * per_shard):
            frames = 5 + i
            w.write(LatentSample(key=f"k{i}", latent=rng.normal(size=(frames, 4)), ref=rng.normal(size=(3, 4)),
                                 text="hi", speaker="s", meta={}))
    return w.paths


def test_build_manifest_describes_each_tar(tmp_path: Path) -> None:
    paths = _write_tars(tmp_path, 2)
    (tmp_path / ".t-hidden.tar").write_bytes(b"x")  # hidden: not part of the corpus
    m = build_manifest(tmp_path)
    assert [s.name for s in m.shards] == ["t-000000.tar", "t-000001.tar"]
    first = m.shards[0]
    assert (first.codec, first.latent_dim, first.frame_rate, first.samples) == ("mel", 4, 10.0, 2)
    assert first.audio_seconds == pytest.approx((5 + 6) / 10.0)
    assert first.size == paths[0].stat().st_size and first.sha256 == sha256_of(paths[0])
    assert write_manifest(tmp_path).hash == m.hash
    assert read_manifest((tmp_path / mf.MANIFEST_NAME).read_bytes(), m.hash) == m
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ManifestError, match="junk.tar"):
        build_manifest(tmp_path)


def test_manifest_command_prints_the_swarm_id(tmp_path: Path) -> None:
    _write_tars(tmp_path, 1)
    result = CliRunner().invoke(main, ["manifest", str(tmp_path)])
    assert result.exit_code == 0, result.output
    want = read_manifest((tmp_path / mf.MANIFEST_NAME).read_bytes()).swarm_id
    assert result.output.splitlines()[-1] == want
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["manifest", str(empty)])
    assert result.exit_code != 0 and "holds no .tar shard" in result.output
