"""`pack`: LJSpeech-style folders -> latent tars, read back with the training reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gossip_tts.audio import MelCodec, read_wav, write_wav
from gossip_tts.audio.pack import PackConfig, pack, run
from gossip_tts.data import LatentSample, LatentStream, StreamConfig
from tests.paths import REPO

LJ_MINI = REPO.parent / "shared" / "data" / "ljspeech-mini"


def _read_back(out: Path) -> dict[str, LatentSample]:
    cfg = StreamConfig(sources=[str(out)], info=None, loop=False, shuffle_shards=False, shuffle_buffer=0)
    with LatentStream(cfg) as stream:
        samples = list(stream)
    by_key = {s.key: s for s in samples}
    assert len(by_key) == len(samples), "a key was written twice"
    return by_key


def _tone(freq: float, seconds: float = 0.4, sr: int = 16000) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * freq * np.arange(int(sr * seconds)) / sr)).astype(np.float32)


def _make_folder(root: Path, lines: list[str], wavs: dict[str, np.ndarray | bytes]) -> Path:
    (root / "wavs").mkdir(parents=True)
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for key, audio in wavs.items():
        if isinstance(audio, bytes):
            (root / "wavs" / f"{key}.wav").write_bytes(audio)
        else:
            write_wav(root / "wavs" / f"{key}.wav", audio, 16000)
    return root


def test_pack_ljspeech_mini_and_read_back(tmp_path) -> None:
    if not (LJ_MINI / "metadata.csv").is_file():
        pytest.skip(f"{LJ_MINI} not found (../shared/data/ljspeech-mini is not in this checkout)")
    calls: list[tuple[int, int]] = []
    report = pack(PackConfig(LJ_MINI, tmp_path / "out", shard_size=10), progress=lambda d, t: calls.append((d, t)))
    assert (report.clips, report.n_skipped, len(report.shards)) == (24, 0, 3)
    assert [p.name for p in report.shards] == [f"ljspeech-mini-00000{i}.tar" for i in range(3)]
    assert report.audio_seconds == pytest.approx(164.0, abs=1.0)
    assert calls[-1] == (24, 24) and len(calls) == 24

    texts = dict(line.split("|", 1) for line in (LJ_MINI / "metadata.csv").read_text().splitlines())
    got = _read_back(tmp_path / "out")
    assert sorted(got) == sorted(texts)
    keys = sorted(got)
    for i, (key, s) in enumerate(sorted(got.items())):
        assert s.text == texts[key]
        assert s.speaker == "ljspeech-mini" and s.meta["codec"] == "mel"
        assert s.latent.ndim == 2 and s.latent.shape[1] == 128 and s.ref.shape[1] == 128
        assert s.meta["target_duration"] == pytest.approx(s.frames / (22050 / 256))
        ref_key = s.meta["ref_key"]
        assert ref_key != key and ref_key == keys[(i + 1) % len(keys)]
        np.testing.assert_array_equal(s.ref, got[ref_key].latent)  # the ref is that clip's latent
        assert not np.array_equal(s.ref[: len(s.latent)], s.latent[: len(s.ref)])

    wav, sr = read_wav(LJ_MINI / "wavs" / "LJ001-0007.wav")
    want = MelCodec().encode(wav, sr)
    np.testing.assert_allclose(got["LJ001-0007"].latent, want, atol=5e-3)  # float16 storage


def test_bad_clips_are_skipped_and_counted(tmp_path) -> None:
    src = _make_folder(
        tmp_path / "spk",
        [
            "c|third clip",
            "a|first clip|First clip, normalized",
            "b|second clip||",
            "missing|no wav for this one",
            "empty|",
            "blank3|  |   ",
            "junk|this wav is not audio",
            "",
            "loner-line-without-text",
            "a|a repeated id",
            "bad.id|dots cannot be shard keys",
        ],
        {"a": _tone(200), "b": _tone(300), "c": _tone(400), "empty": _tone(500), "blank3": _tone(500),
         "junk": b"RIFF....WAVEjunk", "bad.id": _tone(600)},
    )
    calls: list[tuple[int, int]] = []
    report = pack(PackConfig(src, tmp_path / "out", speaker="Ann Lee"), progress=lambda d, t: calls.append((d, t)))
    assert report.clips == 3 and report.n_skipped == 7
    assert report.skipped_by_reason() == {
        "missing wav": 1, "empty text": 2, "unreadable wav": 1, "malformed line": 1, "duplicate id": 1, "bad id": 1,
    }
    assert ("missing", "missing wav") in report.skipped
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]  # a, b, c, junk pass the metadata checks
    assert report.audio_seconds == pytest.approx(1.2, abs=1e-3)
    assert [p.name for p in report.shards] == ["Ann_Lee-000000.tar"]
    assert "skipped 7" in report.summary()

    got = _read_back(tmp_path / "out")
    assert sorted(got) == ["a", "b", "c"]
    assert got["a"].text == "First clip, normalized"  # 3rd column when present
    assert got["b"].text == "second clip"  # empty 3rd column falls back to the 2nd
    assert {k: s.meta["ref_key"] for k, s in got.items()} == {"a": "b", "b": "c", "c": "a"}
    assert all(s.speaker == "Ann Lee" for s in got.values())
    n = round(0.4 * 22050) // 256 + 1
    assert all(s.latent.shape == (n, 128) for s in got.values())


def test_one_clip_cannot_reference_another(tmp_path) -> None:
    src = _make_folder(tmp_path / "one", ["a|only clip", "b|gone"], {"a": _tone(200)})
    with pytest.raises(ValueError, match="1 usable clip.*different clip"):
        pack(PackConfig(src, tmp_path / "out"))
    src2 = _make_folder(tmp_path / "two", ["a|fine", "b|broken"], {"a": _tone(200), "b": b"not a wav"})
    with pytest.raises(ValueError, match="1 readable clip"):
        pack(PackConfig(src2, tmp_path / "out2"))
    assert not list((tmp_path / "out2").glob("*.tar"))


def test_run_names_every_clip_it_drops_also_when_too_few_are_left(tmp_path) -> None:
    src = _make_folder(tmp_path / "two", ["a|fine", "b|broken", "c|", "d|no wav"], {"a": _tone(200), "b": b"not a wav"})
    lines: list[str] = []
    with pytest.raises(ValueError, match="1 readable clip"):
        run(PackConfig(src, tmp_path / "out"), emit=lines.append)
    named = sorted(line for line in lines if line.startswith("  skipped"))
    assert [line.split(":")[0] for line in named] == ["  skipped b", "  skipped c", "  skipped d"], lines
    assert "unreadable wav" in named[0] and "empty text" in named[1] and "missing wav" in named[2]


def test_run_names_every_dropped_clip_however_many(tmp_path) -> None:
    keys = [f"k{i:02d}" for i in range(30)]
    src = _make_folder(tmp_path / "many", ["a|one", "b|two", *(f"{k}|gone" for k in keys)], {"a": _tone(200), "b": _tone(300)})
    lines: list[str] = []
    run(PackConfig(src, tmp_path / "out"), emit=lines.append)
    assert [line for line in lines if line.startswith("  skipped")] == [f"  skipped {k}: missing wav" for k in keys]


def test_existing_shards_are_not_silently_mixed(tmp_path) -> None:
    src = _make_folder(tmp_path / "spk", ["a|one", "b|two"], {"a": _tone(200), "b": _tone(300)})
    pack(PackConfig(src, tmp_path / "out"))
    with pytest.raises(FileExistsError, match="spk-\\*.tar"):
        pack(PackConfig(src, tmp_path / "out"))
    assert pack(PackConfig(src, tmp_path / "out", overwrite=True)).clips == 2


def test_config_and_layout_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown codec"):
        PackConfig(tmp_path, tmp_path / "out", codec="wavenet")
    with pytest.raises(ValueError, match="shard_size"):
        PackConfig(tmp_path, tmp_path / "out", shard_size=0)
    with pytest.raises(FileNotFoundError, match="metadata.csv"):
        pack(PackConfig(tmp_path, tmp_path / "out"))
    with pytest.raises(FileNotFoundError, match="source folder"):
        pack(PackConfig(tmp_path / "absent", tmp_path / "out"))


def test_run_reports_progress_summary_and_skips(tmp_path) -> None:
    src = _make_folder(tmp_path / "spk", ["a|one", "b|two", "c|"], {"a": _tone(200), "b": _tone(300)})
    lines: list[str] = []
    report = run(PackConfig(src, tmp_path / "out"), emit=lines.append)
    assert report.clips == 2
    assert lines[:-1] == [
        "encoded 1/2 clips",
        "encoded 2/2 clips",
        "packed 2 clips (0.0 min of audio, codec mel) into 1 shard(s); skipped 1 (1 empty text)",
        "  skipped c: empty text",
    ]
    assert report.manifest is not None
    assert lines[-1] == f"wrote swarm-manifest.json: share this corpus with --data swarm:{report.manifest.hash}"
