"""Echo TTS's latent as a codec: Fish-S1-DAC's quantised `z_q`, projected by Echo's PCA to 80 dims.

One frame per 2048 samples at 44.1 kHz (21.53 frames/s). Encode: `z_q` (1024-d) minus the PCA
mean, times the 80 PCA components, times Echo's latent scale; decode inverts that and runs the
codec's decoder. The network is the `echo-tts` package's own (the `[echo]` extra); nothing of
it is copied here. Long audio is encoded in chunks of 640 frames as Echo encodes references.

Weights (not bundled; Echo's weights and this codec's output are CC-BY-NC-SA-4.0): a folder
in the layout Echo's own `model_path` reads, as `huggingface-cli download REPO --local-dir
DIR/REPO` leaves it:

    DIR/jordand/fish-s1-dac-min/pytorch_model.safetensors   the codec
    DIR/jordand/echo-tts-base/pca_state.safetensors         the PCA (components, mean, scale)

Without a folder they are fetched from the Hugging Face Hub when online.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from gossip_tts.device import DEVICE_CHOICES, resolve_device
from gossip_tts.audio.echo_package import INSTALL_HINT, echo_module

from .base import Codec
from .io import resample

AE_FILE = ("jordand/fish-s1-dac-min", "pytorch_model.safetensors")
PCA_FILE = ("jordand/echo-tts-base", "pca_state.safetensors")
HOP = 2048
CHUNK_FRAMES = 640


@dataclass(frozen=True)
class EchoCodecConfig:
    """How to build the echo codec."""

    weights: str | None = None
    """Folder in Echo's model_path layout (module docstring); None downloads from the Hub."""
    device: str = "cpu"
    """A `--device` choice or a torch device name."""
    random_init: bool = False
    """Random codec weights, nothing read or downloaded: for tests only (needs `pca`)."""
    pca: dict[str, torch.Tensor] | None = None
    """PCA state (pca_components (80, 1024), pca_mean (1024,), latent_scale ()) instead of the file."""

    def __post_init__(self) -> None:
        if self.random_init and self.weights is not None:
            raise ValueError("give either weights or random_init=True, not both")
        if self.random_init and self.pca is None:
            raise ValueError("random_init needs a pca state")


def _file(cfg: EchoCodecConfig, repo: str, name: str) -> Path:
    if cfg.weights is not None:
        path = Path(cfg.weights) / repo / name
        if not path.is_file():
            raise FileNotFoundError(f"echo codec: {path} not found (see gossip_tts/audio/echo_codec.py for the layout)")
        return path
    try:
        from huggingface_hub import hf_hub_download  # noqa: PLC0415 - only when downloading
    except ImportError as e:
        raise ImportError(f"downloading Echo's codec needs huggingface_hub ({INSTALL_HINT}), or pass --codec-weights DIR") from e
    return Path(hf_hub_download(repo, name))


class EchoCodec(Codec):
    """Fish-S1-DAC z_q + Echo's PCA: (T, 80) latents at 44100/2048 frames per second."""

    name = "echo"
    latent_dim = 80
    sample_rate = 44100
    frame_rate = 44100 / HOP

    def __init__(self, cfg: EchoCodecConfig | None = None) -> None:
        self.cfg = cfg or EchoCodecConfig()
        d = self.cfg.device
        self.device = resolve_device(d) if d in DEVICE_CHOICES else torch.device(d)
        ae = echo_module("autoencoder").build_ae()
        if not self.cfg.random_init:
            missing, _ = ae.load_state_dict(load_file(str(_file(self.cfg, *AE_FILE))), strict=False)
            if missing:
                raise RuntimeError(f"echo codec weights lack {len(missing)} tensors, e.g. {missing[:2]}")
        self.ae = ae.to(self.device).eval()
        pca = self.cfg.pca if self.cfg.pca is not None else load_file(str(_file(self.cfg, *PCA_FILE)))
        self.components = pca["pca_components"].float().to(self.device)  # (80, 1024)
        self.mean = pca["pca_mean"].float().to(self.device)  # (1024,)
        self.scale = float(pca["latent_scale"])
        if tuple(self.components.shape) != (self.latent_dim, self.mean.shape[-1]):
            raise ValueError(f"PCA components {tuple(self.components.shape)} do not match 80 x {self.mean.shape[-1]}")

    def encode(self, wav: np.ndarray, sr: int) -> np.ndarray:
        """Mono waveform at `sr` Hz -> (samples at 44.1 kHz // 2048, 80) float32 (Echo's length rule)."""
        wav = np.asarray(wav, dtype=np.float32)
        if wav.ndim != 1 or wav.size == 0:
            raise ValueError(f"echo codec wants a non-empty mono 1-D waveform, got shape {wav.shape}")
        if sr != self.sample_rate:
            wav = resample(wav, sr, self.sample_rate)
        frames = max(1, wav.size // HOP)
        audio = torch.from_numpy(np.ascontiguousarray(wav)).to(self.device)
        parts = []
        with torch.inference_mode():
            for start in range(0, audio.numel(), CHUNK_FRAMES * HOP):
                z_q = self.ae.encode_zq(audio[start : start + CHUNK_FRAMES * HOP][None, None]).float()  # (1, 1024, t)
                parts.append((z_q[0].T - self.mean) @ self.components.T * self.scale)  # (t, 80)
        z = torch.cat(parts)[:frames]
        return np.ascontiguousarray(z.cpu().numpy(), dtype=np.float32)

    def decode(self, latent: np.ndarray) -> np.ndarray:
        """(T, 80) latents -> float32 waveform of T * 2048 samples at 44.1 kHz."""
        z = np.asarray(latent, dtype=np.float32)
        if z.ndim != 2 or z.shape[1] != self.latent_dim or z.shape[0] == 0:
            raise ValueError(f"echo codec wants latents of shape (T>0, 80), got {z.shape}")
        zt = torch.from_numpy(np.ascontiguousarray(z)).to(self.device)
        with torch.inference_mode():
            z_q = (zt / self.scale) @ self.components + self.mean  # (T, 1024)
            wav = self.ae.decode_zq(z_q.T[None].to(self.ae.dtype))  # (1, 1, samples)
        return wav[0, 0].float().cpu().numpy().astype(np.float32, copy=False)
