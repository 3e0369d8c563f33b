"""Wav I/O and the polyphase resampler."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from gossip_tts.audio.io import read_wav, resample, write_wav


def _tone(freq: float, sr: int, seconds: float = 1.0, amp: float = 0.5) -> np.ndarray:
    return (amp * np.sin(2 * np.pi * freq * np.arange(int(sr * seconds)) / sr)).astype(np.float32)


def test_write_then_read_round_trips_mono_pcm16(tmp_path) -> None:
    wav = _tone(440, 16000)
    path = write_wav(tmp_path / "sub" / "a.wav", wav, 16000)
    back, sr = read_wav(path)
    assert sr == 16000 and back.dtype == np.float32 and back.shape == wav.shape
    assert np.abs(back - wav).max() < 1 / 2**14  # 16-bit quantisation


def test_write_clips_instead_of_wrapping(tmp_path) -> None:
    back, _ = read_wav(write_wav(tmp_path / "loud.wav", np.array([2.0, -3.0, 0.5], np.float32), 8000))
    np.testing.assert_allclose(back, [1.0, -1.0, 0.5], atol=1e-4)


def test_read_averages_channels(tmp_path) -> None:
    left, right = _tone(440, 8000), np.zeros(8000, np.float32)
    sf.write(tmp_path / "st.wav", np.stack([left, right], axis=1), 8000, subtype="FLOAT")
    back, _ = read_wav(tmp_path / "st.wav")
    np.testing.assert_allclose(back, left / 2, atol=1e-6)


def test_read_errors_name_the_file(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.wav"):
        read_wav(tmp_path / "nope.wav")
    (tmp_path / "junk.wav").write_bytes(b"RIFF not really a wav")
    with pytest.raises(ValueError, match="junk.wav"):
        read_wav(tmp_path / "junk.wav")


@pytest.mark.parametrize("orig,new", [(16000, 22050), (44100, 22050), (22050, 44100), (48000, 16000)])
def test_resample_keeps_a_tone_in_band(orig: int, new: int) -> None:
    """A 440 Hz tone keeps its amplitude and phase: compare with the same tone made at `new`."""
    y = resample(_tone(440, orig), orig, new)
    assert y.shape == (new,)
    want = _tone(440, new)
    mid = slice(new // 10, -new // 10)  # away from the zero-padded edges
    assert np.abs(y[mid] - want[mid]).max() < 2e-3


def test_resample_removes_content_above_the_new_nyquist() -> None:
    """Downsampling must low-pass: a 10 kHz tone cannot alias into a 16 kHz signal."""
    y = resample(_tone(10000, 44100), 44100, 16000)
    assert np.sqrt(np.mean(y[1600:-1600] ** 2)) < 1e-3


def test_resample_identity_and_errors() -> None:
    x = _tone(440, 8000)
    np.testing.assert_array_equal(resample(x, 8000, 8000), x)
    with pytest.raises(ValueError, match="positive"):
        resample(x, 0, 8000)
    with pytest.raises(ValueError, match="mono"):
        resample(np.zeros((2, 10), np.float32), 8000, 16000)
