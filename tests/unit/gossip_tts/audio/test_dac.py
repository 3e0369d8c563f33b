"""DAC codec wrapper, with random or tiny saved weights: no download, no pretrained model.

Runs only where descript-audio-codec imports (the `dac` extra); skipped elsewhere.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

dac = pytest.importorskip("dac", reason="descript-audio-codec not installed (pip install 'gossip-tts[dac]')")
torch = pytest.importorskip("torch")

from gossip_tts.audio import load_codec  # noqa: E402
from gossip_tts.audio.dac_codec import DacCodec, DacConfig  # noqa: E402


def _tone(sr: int, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(sr * seconds)) / sr
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * np.sin(2 * np.pi * 3100 * t)).astype(np.float32)


def _tiny_dac() -> "dac.DAC":
    torch.manual_seed(0)
    return dac.DAC(encoder_dim=4, decoder_dim=16, n_codebooks=2, codebook_size=16, codebook_dim=4).eval()


@pytest.fixture(scope="module")
def random_codec() -> DacCodec:
    """The full-size 44.1 kHz DAC with random weights (built once: 76M parameters)."""
    torch.manual_seed(0)
    return DacCodec(DacConfig(random_init=True))


def test_random_dac_round_trip_shapes(random_codec: DacCodec) -> None:
    codec = random_codec
    assert (codec.latent_dim, codec.sample_rate) == (1024, 44100)
    assert codec.frame_rate == pytest.approx(86.13, abs=0.01)
    z = codec.encode(_tone(44100), 44100)
    assert z.shape == (math.ceil(44100 / 512), 1024) and z.dtype == np.float32
    assert np.isfinite(z).all()
    wav = codec.decode(z)
    assert wav.dtype == np.float32 and wav.ndim == 1 and np.isfinite(wav).all()
    assert abs(wav.size - 44100) <= 512, "decoded length should be the input's, up to one hop of padding"


def test_encode_resamples_other_rates(random_codec: DacCodec) -> None:
    z = random_codec.encode(_tone(16000, 0.5), 16000)
    assert z.shape == (math.ceil(22050 / 512), 1024)


def test_weights_file_loads_the_saved_model(tmp_path) -> None:
    model = _tiny_dac()
    path = tmp_path / "tiny.pth"
    model.save(str(path), package=False)
    codec = load_codec("dac", weights=str(path))
    assert codec.latent_dim == model.latent_dim == 64
    wav = _tone(44100, 0.25)
    with torch.inference_mode():
        want = model.encode(model.preprocess(torch.from_numpy(wav)[None, None], 44100))[0][0].T.numpy()
    np.testing.assert_allclose(codec.encode(wav, 44100), want, rtol=1e-5, atol=1e-6)


def test_weights_for_another_model_are_refused(tmp_path) -> None:
    path = tmp_path / "other.pth"
    torch.save({"state_dict": {"nope": torch.zeros(1)}, "metadata": {"kwargs": {"encoder_dim": 4}}}, path)
    with pytest.raises(RuntimeError, match="cannot load DAC weights"):
        load_codec("dac", weights=str(path))


def test_missing_weights_file_is_named(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.pth"):
        load_codec("dac", weights=str(tmp_path / "missing.pth"))


def test_offline_without_weights_says_what_to_do(monkeypatch) -> None:
    def offline(**_: object) -> None:
        raise ConnectionError("no route to github.com")

    monkeypatch.setattr(dac.utils, "download", offline)
    with pytest.raises(RuntimeError, match="--codec-weights PATH"):
        load_codec("dac")
