"""The echo codec: echo-tts's Fish-S1-DAC with random weights plus a random PCA, against Echo's
own encode/decode arithmetic (its ae_encode/ae_decode), and its length rule. Needs the
`echo-tts` package (.ci/run gives it its own venv); nothing is downloaded."""

from __future__ import annotations

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def codec():
    from gossip_tts.audio.echo_package import echo_module

    try:
        echo_module("autoencoder")
    except ImportError as exc:
        pytest.skip(f"echo-tts is not installed here ({exc}); .ci/run runs this in its own venv")
    from gossip_tts.audio.echo_codec import EchoCodec, EchoCodecConfig

    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(1024, 80, generator=g))
    pca = {"pca_components": q.T.contiguous(), "pca_mean": 0.1 * torch.randn(1024, generator=g),
           "latent_scale": torch.tensor(0.7)}
    torch.manual_seed(0)
    return EchoCodec(EchoCodecConfig(random_init=True, pca=pca))


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_encode_is_echos_pca_of_z_q_with_its_length_rule(codec) -> None:
    wav = np.random.default_rng(0).uniform(-0.5, 0.5, 2048 * 5 + 700).astype(np.float32)
    got = codec.encode(wav, 44100)
    assert got.shape == (5, 80) and got.dtype == np.float32
    with torch.inference_mode():
        z_q = codec.ae.encode_zq(torch.from_numpy(wav)[None, None]).float()  # Echo's ae_encode, by hand
        want = ((z_q.transpose(1, 2) - codec.mean) @ codec.components.T * codec.scale)[0, :5]
    assert want.abs().max() > 0 and rel(torch.from_numpy(got), want) < 1e-4


def test_decode_is_echos_inverse_pca_then_the_decoder(codec) -> None:
    z = np.random.default_rng(1).standard_normal((4, 80)).astype(np.float32)
    got = codec.decode(z)
    assert got.shape == (4 * 2048,) and np.isfinite(got).all()
    with torch.inference_mode():
        z_q = (torch.from_numpy(z) / codec.scale) @ codec.components + codec.mean
        want = codec.ae.decode_zq(z_q.T[None]).float()[0, 0]
    assert rel(torch.from_numpy(got), want) < 1e-4
    with pytest.raises(ValueError):
        codec.decode(np.zeros((3, 81), dtype=np.float32))
