"""Descript Audio Codec (DAC) 44.1 kHz as a codec: its continuous `z` is the latent.

DAC is an optional extra (`pip install 'gossip-tts[dac]'`): it pins an old protobuf and
pulls torchaudio, so importing it is deferred to construction and a failure is turned into
an error that says how to install it.

Latent: the quantised continuous `z` that `model.encode` returns, (1024, T) at hop 512,
i.e. 44100 / 512 = 86.13 frames per second, transposed to (T, 1024) and divided by
`DacConfig.latent_scale`. Decoding multiplies back and runs `model.decode(z)`, so the scale
only changes what the flow model sees. It defaults to 1.0 (no rescaling); set it to the
standard deviation of `z` measured on your data with the pretrained weights to bring
latents to order 1. Whatever it is, it is part of the latent space: shards packed with one
scale must not be mixed with shards packed with another.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gossip_tts.device import DEVICE_CHOICES, resolve_device

from .base import Codec
from .io import resample

INSTALL_HINT = "pip install 'gossip-tts[dac]'"


@dataclass(frozen=True)
class DacConfig:
    """How to build the DAC codec."""

    weights: str | None = None
    """Path to a DAC weights file (`dac.DAC.load`); None downloads DAC's own 44 kHz weights."""
    device: str = "cpu"
    """Torch device the model runs on: a `--device` choice ("auto" included) or a torch name like "cuda:1"."""
    random_init: bool = False
    """Build `dac.DAC()` with random weights and download nothing: for tests only."""
    latent_scale: float = 1.0
    """`z` is divided by this on encode and multiplied on decode (see the module docstring)."""

    def __post_init__(self) -> None:
        if self.latent_scale <= 0:
            raise ValueError(f"latent_scale must be positive, got {self.latent_scale}")
        if self.random_init and self.weights is not None:
            raise ValueError("give either weights or random_init=True, not both")


def _import_dac() -> Any:
    try:
        import dac  # noqa: PLC0415 - optional dependency, imported only when asked for
    except Exception as e:  # a broken torchaudio beside torch fails with OSError/RuntimeError too
        raise ImportError(
            f"the dac codec needs descript-audio-codec, which could not be imported ({type(e).__name__}: {e}); "
            f"install it with: {INSTALL_HINT}"
        ) from e
    return dac


def _load_weights(dac: Any, path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"DAC weights file not found: {path}")
    try:
        # strict: a file for another model must fail here, not load as half-random weights
        return dac.DAC.load(str(path), strict=True)
    except Exception as e:
        raise RuntimeError(f"cannot load DAC weights from {path}: {type(e).__name__}: {e}") from e


def _load_model(dac: Any, cfg: DacConfig) -> Any:
    if cfg.random_init:
        return dac.DAC()
    if cfg.weights is not None:
        return _load_weights(dac, Path(cfg.weights))
    try:
        path = dac.utils.download(model_type="44khz")
    except Exception as e:
        raise RuntimeError(
            f"cannot download the DAC 44 kHz weights ({type(e).__name__}: {e}); "
            "go online, or pass a local weights file with --codec-weights PATH"
        ) from e
    return _load_weights(dac, Path(path))


class DacCodec(Codec):
    """DAC 44.1 kHz: (T, 1024) latents at 86.13 frames per second, decoded by DAC's decoder."""

    name = "dac"

    def __init__(self, cfg: DacConfig | None = None) -> None:
        self.cfg = cfg or DacConfig()
        d = self.cfg.device
        self.device = resolve_device(d) if d in DEVICE_CHOICES else torch.device(d)
        dac = _import_dac()
        model = _load_model(dac, self.cfg)
        self.model = model.to(self.device).eval()
        self.sample_rate = int(model.sample_rate)
        self.hop_length = int(model.hop_length)
        self.latent_dim = int(model.latent_dim)
        self.frame_rate = self.sample_rate / self.hop_length

    def encode(self, wav: np.ndarray, sr: int) -> np.ndarray:
        """Mono waveform at `sr` Hz -> (ceil(samples at 44.1 kHz / 512), 1024) float32."""
        wav = np.asarray(wav, dtype=np.float32)
        if wav.ndim != 1 or wav.size == 0:
            raise ValueError(f"dac codec wants a non-empty mono 1-D waveform, got shape {wav.shape}")
        if sr != self.sample_rate:
            wav = resample(wav, sr, self.sample_rate)
        x = torch.from_numpy(np.ascontiguousarray(wav)).to(self.device)[None, None, :]
        with torch.inference_mode():
            x = self.model.preprocess(x, self.sample_rate)  # right-pads to a multiple of the hop
            z = self.model.encode(x)[0]  # (1, D, T)
        z = z[0].T.float().cpu().numpy() / self.cfg.latent_scale
        return np.ascontiguousarray(z, dtype=np.float32)

    def decode(self, latent: np.ndarray) -> np.ndarray:
        """(T, 1024) latents -> float32 waveform of T * 512 samples at 44.1 kHz."""
        z = np.asarray(latent, dtype=np.float32)
        if z.ndim != 2 or z.shape[1] != self.latent_dim or z.shape[0] == 0:
            raise ValueError(f"dac codec wants latents of shape (T>0, {self.latent_dim}), got {z.shape}")
        zt = torch.from_numpy(np.ascontiguousarray(z.T * self.cfg.latent_scale)).to(self.device)[None]
        with torch.inference_mode():
            wav = self.model.decode(zt)  # (1, 1, samples)
        return wav[0, 0].float().cpu().numpy().astype(np.float32, copy=False)
