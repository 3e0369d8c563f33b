"""A weight-free log-mel codec, inverted by Griffin-Lim, so everything works offline.

Encode: resample to 22050 Hz, magnitude STFT (n_fft 1024, hop 256, Hann), 128 Slaney mel
bands over 0 Hz to Nyquist, natural log with a floor, then a fixed affine normalisation.
Decode: undo the normalisation, map mel back to linear magnitude by non-negative least
squares, and recover a phase by fast Griffin-Lim. No learned weights, fully deterministic.

Normalisation constants. The flow model wants latents of order 1, so the log-mel is
shifted and scaled by fixed numbers: `(log(max(mel, 1e-5)) - LOG_MEL_MEAN) / LOG_MEL_STD`
with LOG_MEL_MEAN = -5.5 and LOG_MEL_STD = 2.2: the mean and standard deviation of the
log-mel over all frames and bands of the 24 LJSpeech clips LJ001-0001..0024, rounded, so
those clips' latents have mean about 0 and standard deviation about 1
(docs/benchmarks/peer.md#the-mel-codecs-normalisation); digital silence (the floor) maps to -2.73.
Constants, not per-clip statistics: the latent of a clip must not depend on which other clips
were packed with it, and loudness differences must survive the round trip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .base import Codec
from .io import resample

LOG_MEL_MEAN = -5.5
LOG_MEL_STD = 2.2


@dataclass(frozen=True)
class MelConfig:
    """Settings of the mel codec. Changing any but the Griffin-Lim ones changes the latent space."""

    sample_rate: int = 22050
    """Rate the codec works at; input at another rate is resampled on encode."""
    n_fft: int = 1024
    """STFT size and Hann window length (46 ms at 22050 Hz)."""
    hop_length: int = 256
    """Samples between frames: 22050 / 256 = 86.13 latent frames per second."""
    n_mels: int = 128
    """Mel bands, i.e. the latent dimension."""
    f_min: float = 0.0
    """Lowest band edge in Hz."""
    f_max: float | None = None
    """Highest band edge in Hz; None means Nyquist, which keeps the top octave invertible."""
    log_floor: float = 1e-5
    """Magnitudes below this are clamped before the log, so silence maps to a finite value."""
    mean: float = LOG_MEL_MEAN
    """Subtracted from the log-mel (see the module docstring for how it was chosen)."""
    std: float = LOG_MEL_STD
    """Divides the centred log-mel, bringing latents to order 1."""
    griffin_lim_iters: int = 32
    """Phase-recovery iterations on decode; more is slower and slightly cleaner."""
    momentum: float = 0.99
    """Fast Griffin-Lim momentum (Perraudin et al. 2013); 0 gives plain Griffin-Lim."""
    nnls_iters: int = 16
    """Multiplicative non-negative least-squares refinements of the mel -> linear inversion."""
    seed: int = 0
    """Seed of the initial random phase, so decode is deterministic."""

    def __post_init__(self) -> None:
        if self.sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {self.sample_rate}")
        if self.n_fft <= 0 or self.hop_length <= 0 or self.hop_length > self.n_fft:
            raise ValueError(f"need 0 < hop_length <= n_fft, got hop {self.hop_length}, n_fft {self.n_fft}")
        if self.n_mels <= 0:
            raise ValueError(f"n_mels must be positive, got {self.n_mels}")
        top = self.sample_rate / 2 if self.f_max is None else self.f_max
        if not 0 <= self.f_min < top <= self.sample_rate / 2:
            raise ValueError(f"need 0 <= f_min < f_max <= Nyquist, got {self.f_min}..{top} Hz at {self.sample_rate} Hz")
        if self.log_floor <= 0 or self.std <= 0:
            raise ValueError("log_floor and std must be positive")
        if self.griffin_lim_iters < 1 or self.nnls_iters < 0:
            raise ValueError("griffin_lim_iters must be >= 1 and nnls_iters >= 0")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (as in librosa's default)."""
    f = np.asarray(f, dtype=np.float64)
    lin = f / (200.0 / 3)
    logstep = math.log(6.4) / 27.0
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / logstep, lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    logstep = math.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), m * (200.0 / 3))


def mel_filterbank(sr: int, n_fft: int, n_mels: int, f_min: float, f_max: float) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular Slaney filters with unit area (librosa's `norm="slaney"`)."""
    fft_hz = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    fb = np.maximum(0.0, np.minimum(lower, upper))
    fb *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    if np.any(fb.max(axis=1) == 0):
        raise ValueError(f"{n_mels} mel bands over n_fft {n_fft} leave some bands empty; use fewer bands or a larger n_fft")
    return fb.astype(np.float32)


class MelCodec(Codec):
    """Log-mel latents: (T, 128) at 86.13 frames per second, decoded by Griffin-Lim."""

    name = "mel"

    def __init__(self, cfg: MelConfig | None = None) -> None:
        self.cfg = cfg or MelConfig()
        c = self.cfg
        self.latent_dim = c.n_mels
        self.sample_rate = c.sample_rate
        self.frame_rate = c.sample_rate / c.hop_length
        f_max = c.sample_rate / 2 if c.f_max is None else c.f_max
        self._fb = torch.from_numpy(mel_filterbank(c.sample_rate, c.n_fft, c.n_mels, c.f_min, f_max))
        self._window = torch.hann_window(c.n_fft)
        self._fb_pinv = torch.linalg.pinv(self._fb)

    # -- analysis ---------------------------------------------------------------------

    def _stft(self, wav: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        return torch.stft(wav, c.n_fft, c.hop_length, window=self._window, center=True, pad_mode="reflect", return_complex=True)

    def magnitude(self, wav: np.ndarray) -> np.ndarray:
        """(frames, n_fft // 2 + 1) linear STFT magnitude at the codec's rate, for quality checks."""
        return self._stft(self._as_tensor(wav)).abs().T.numpy()

    def _as_tensor(self, wav: np.ndarray) -> torch.Tensor:
        wav = np.asarray(wav, dtype=np.float32)
        if wav.ndim != 1:
            raise ValueError(f"mel codec wants a mono 1-D waveform, got shape {wav.shape}")
        if wav.size == 0:
            raise ValueError("cannot encode an empty waveform")
        t = torch.from_numpy(np.ascontiguousarray(wav))
        if t.numel() <= self.cfg.n_fft // 2:  # reflect padding needs more than half a window
            t = torch.nn.functional.pad(t, (0, self.cfg.n_fft // 2 + 1 - t.numel()))
        return t

    def encode(self, wav: np.ndarray, sr: int) -> np.ndarray:
        """Mono waveform at `sr` Hz -> (1 + samples // 256, 128) float32 normalised log-mel."""
        c = self.cfg
        if sr != c.sample_rate:
            wav = resample(wav, sr, c.sample_rate)
        with torch.no_grad():
            mag = self._stft(self._as_tensor(wav)).abs()  # (F, T)
            mel = self._fb @ mag
            z = (torch.log(mel.clamp_min(c.log_floor)) - c.mean) / c.std
        return z.T.contiguous().numpy()

    # -- synthesis --------------------------------------------------------------------

    def _mel_to_linear(self, mel: torch.Tensor) -> torch.Tensor:
        """Non-negative least squares for `fb @ S = mel`: pseudo-inverse start, clamped, then
        multiplicative updates, which keep S >= 0 and never raise the squared error."""
        fb = self._fb
        s = (self._fb_pinv @ mel).clamp_min(self.cfg.log_floor)
        fbt_mel = fb.T @ mel
        fbt_fb = fb.T @ fb
        for _ in range(self.cfg.nnls_iters):
            s = s * fbt_mel / (fbt_fb @ s).clamp_min(1e-10)
        return s

    def _griffin_lim(self, mag: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        length = (mag.shape[1] - 1) * c.hop_length
        gen = torch.Generator().manual_seed(c.seed)
        phase = torch.rand(mag.shape, generator=gen) * (2 * math.pi)
        angles = torch.polar(torch.ones_like(mag), phase)
        prev = torch.zeros_like(angles)
        for _ in range(c.griffin_lim_iters):
            wav = torch.istft(mag * angles, c.n_fft, c.hop_length, window=self._window, center=True, length=length)
            rebuilt = self._stft(wav)
            angles = rebuilt - prev * (c.momentum / (1 + c.momentum))
            angles = angles / angles.abs().clamp_min(1e-16)
            prev = rebuilt
        return torch.istft(mag * angles, c.n_fft, c.hop_length, window=self._window, center=True, length=length)

    def decode(self, latent: np.ndarray) -> np.ndarray:
        """(T, 128) latents -> float32 waveform of (T - 1) * 256 samples at 22050 Hz."""
        c = self.cfg
        z = np.asarray(latent, dtype=np.float32)
        if z.ndim != 2 or z.shape[1] != c.n_mels:
            raise ValueError(f"mel codec wants latents of shape (T, {c.n_mels}), got {z.shape}")
        if z.shape[0] < 2:
            raise ValueError(f"need at least 2 latent frames to decode, got {z.shape[0]}")
        with torch.no_grad():
            mel = torch.exp(torch.from_numpy(z).T * c.std + c.mean)
            wav = self._griffin_lim(self._mel_to_linear(mel))
        return wav.numpy().astype(np.float32, copy=False)
