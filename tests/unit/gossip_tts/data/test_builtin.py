"""The built-in corpus: a learnable synthetic signal, deterministic, built once and reused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from gossip_tts.data import LatentStream, StreamConfig, builtin
from gossip_tts.data.builtin import default_cache_dir, ensure_builtin_corpus, make_voices, synthesize

SR = 22050


def logspec(wav: np.ndarray, n_fft: int = 512, hop: int = 256) -> np.ndarray:
    frames = np.lib.stride_tricks.sliding_window_view(wav, n_fft)[::hop] * np.hanning(n_fft)
    return np.log(np.abs(np.fft.rfft(frames, axis=1)) + 1e-4)


def test_text_decides_content_and_speaker_decides_timbre():
    voices = make_voices(4)
    assert len({round(v.f0) for v in voices}) == 4
    text = "the quick fox sees a zebra."
    a = logspec(synthesize(text, voices[0], SR, np.random.default_rng(1)))
    a2 = logspec(synthesize(text, voices[0], SR, np.random.default_rng(2)))  # other noise draws
    b = logspec(synthesize(text, voices[2], SR, np.random.default_rng(1)))
    c = logspec(synthesize("hello moon under water.", voices[0], SR, np.random.default_rng(1)))
    n = min(len(a), len(a2), len(b), len(c))
    same = np.abs(a[:n] - a2[:n]).mean()
    assert same < 0.5 * np.abs(a[:n] - b[:n]).mean()  # speaker matters far more than noise
    assert same < 0.5 * np.abs(a[:n] - c[:n]).mean()  # so does the text
    # vowels are voiced at the speaker's pitch: the low-frequency peak follows f0
    wav = synthesize("aaaa", voices[0], SR, np.random.default_rng(0))
    spec = np.abs(np.fft.rfft(wav[SR // 10 : SR // 10 + 8192]))
    freqs = np.fft.rfftfreq(8192, 1 / SR)
    band = (freqs > 40) & (freqs < 2.5 * voices[0].f0)
    harmonics = freqs[band][np.argsort(spec[band])[-2:]]
    assert np.min(np.abs(harmonics[:, None] / voices[0].f0 - np.array([1, 2])[None, :])) < 0.15


def test_synthesis_is_deterministic_and_bounded():
    v = make_voices(2)[1]
    a = synthesize("big red kite.", v, SR, np.random.default_rng(5))
    b = synthesize("big red kite.", v, SR, np.random.default_rng(5))
    assert np.array_equal(a, b) and a.dtype == np.float32 and np.abs(a).max() <= 0.5 + 1e-6
    assert make_voices(3) == make_voices(3)


def test_default_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GOSSIP_TTS_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "builtin-v1"
    assert default_cache_dir(2, 3, 1) == tmp_path / "builtin-v1-s2-c3-v1"
    monkeypatch.delenv("GOSSIP_TTS_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "gossip-tts" / "builtin-v1"


def _mel_available() -> bool:
    try:
        from gossip_tts.audio import load_codec

        load_codec("mel")
    except ImportError:
        return False
    return True


needs_mel = pytest.mark.skipif(not _mel_available(), reason="the mel codec (gossip_tts.audio.load_codec) is not importable yet")
SMALL = dict(n_speakers=2, clips_per_speaker=3, val_clips_per_speaker=1)


def _read(d: Path) -> dict:
    with LatentStream(StreamConfig([str(d)], loop=False, shuffle_shards=False, shuffle_buffer=0)) as s:
        return {x.key: x for x in s}


@needs_mel
def test_builtin_corpus_is_deterministic_real_and_reused(tmp_path, monkeypatch):
    tr1, va1 = ensure_builtin_corpus(tmp_path / "one", **SMALL)
    tr2, va2 = ensure_builtin_corpus(tmp_path / "two", **SMALL)
    assert (tmp_path / "one" / "README.txt").read_text().startswith("gossip-tts built-in corpus")
    a, b = _read(tr1), _read(tr2)
    assert sorted(a) == sorted(b) and len(a) == 6 and len(_read(va1)) == 2
    for k in a:
        assert np.array_equal(a[k].latent, b[k].latent) and np.array_equal(a[k].ref, b[k].ref)
        assert a[k].text == b[k].text and a[k].speaker == b[k].speaker
        assert a[k].meta["codec"] == "mel" and a[k].latent.shape[1] == 128
        assert not np.array_equal(a[k].latent[: len(a[k].ref)], a[k].ref[: len(a[k].latent)])  # another clip
    digest = lambda d: [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.glob("*.tar"))]  # noqa: E731
    assert digest(tr1) == digest(tr2) and digest(va1) == digest(va2)
    assert {x.speaker for x in a.values()} == {"spk00", "spk01"}
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary folders left

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the corpus was rebuilt instead of reused")

    monkeypatch.setattr(builtin, "build_corpus", no_rebuild)
    assert ensure_builtin_corpus(tmp_path / "one", **SMALL) == (tr1, va1)
    with pytest.raises(AssertionError, match="rebuilt"):  # other sizes are another corpus
        ensure_builtin_corpus(tmp_path / "one", n_speakers=1, clips_per_speaker=2, val_clips_per_speaker=1)


@needs_mel
@needs_mel
def test_the_build_is_announced_only_when_it_happens(tmp_path):
    told: list[Path] = []
    ensure_builtin_corpus(tmp_path / "c", **SMALL, announce=told.append)
    ensure_builtin_corpus(tmp_path / "c", **SMALL, announce=told.append)
    assert told == [tmp_path / "c"]


def test_builtin_refuses_a_foreign_folder(tmp_path):
    (tmp_path / "mine.txt").write_text("not a corpus")
    with pytest.raises(FileExistsError):
        ensure_builtin_corpus(tmp_path, **SMALL)
    assert (tmp_path / "mine.txt").exists()


def test_builtin_size_validation(tmp_path):
    with pytest.raises(ValueError):
        ensure_builtin_corpus(tmp_path / "x", clips_per_speaker=1)


@needs_mel
def test_a_voice_folder_holds_the_val_splits_own_sentences_and_waveforms(tmp_path):
    """What the device check judges a model against: the held-out clips it was evaluated on,
    as recordings. Encoded again, each wav gives its val clip's latent (as long, and equal but
    for the 16-bit rounding of the quietest frames); another clip's is far off."""
    from gossip_tts.audio import load_codec
    from gossip_tts.audio.io import read_wav
    from gossip_tts.data.builtin import write_voice_folder

    codec = load_codec("mel")
    _, val = ensure_builtin_corpus(tmp_path / "corpus", **SMALL)
    folder = write_voice_folder(tmp_path / "voice", int(codec.sample_rate), n_clips=1, speaker=1, n_speakers=2)
    clips = _read(val)
    rows = [line.split("|") for line in (folder / "metadata.csv").read_text().splitlines()]
    assert [key for key, _ in rows] == ["val-s01-c0000"] and (folder / "reference.wav").exists()
    key, text = rows[0]
    assert clips[key].text == text
    wav, sr = read_wav(folder / "wavs" / f"{key}.wav")
    assert sr == codec.sample_rate
    latent, other = codec.encode(wav, sr), clips["val-s00-c0000"].latent
    assert latent.shape == clips[key].latent.shape and float(np.median(np.abs(latent - clips[key].latent))) < 0.02
    n = min(len(latent), len(other))
    assert float(np.median(np.abs(latent[:n] - other[:n]))) > 0.2
