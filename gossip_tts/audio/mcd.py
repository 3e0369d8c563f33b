"""Mel-cepstral distortion after dynamic time warping (MCD-DTW), the distance TTS papers report
between generated and real audio of the same sentence.

    MCD = (10 / ln 10) · sqrt(2 · Σ_{d=1..D} (c_d − c'_d)²)   per aligned frame pair, in dB,

averaged over the frame pairs of the DTW path that minimises the summed MCD. c0 (the overall
level) is left out, so loudness alone costs nothing.

The mel-cepstra here come from a plain log-mel spectrum (numpy only; papers often use SPTK's
all-pass warped `mcep`, so absolute values are not comparable across papers, only within one
table). They are scaled as SPTK's are: the natural-log mel amplitude is L_m = c0 + Σ_d c_d ·
cos(π d (m + ½) / M), i.e. c_d = (2/M)·DCT-II(L)_d. With that scaling the formula above is exactly
the RMS difference, in dB, of the two cepstrally smoothed log-mel spectra with their mean levels
removed (Parseval; a unit test checks it), which is what makes "an MCD of 6 dB" readable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .mel import mel_filterbank

MCD_SCALE = 10.0 / math.log(10.0)
"""The dB factor of the MCD formula."""


@dataclass(frozen=True)
class MelCepstrumConfig:
    """How a waveform becomes mel-cepstra (defaults: the mel codec's STFT at 22050 Hz)."""

    n_fft: int = 1024
    """STFT size and Hann window length, in samples."""
    hop_length: int = 256
    """Samples between frames."""
    n_mels: int = 80
    """Mel bands (Slaney, 0 Hz to Nyquist) the cepstrum is taken over."""
    n_ceps: int = 24
    """D: the coefficients c1..cD compared (c0 is never compared)."""
    power_floor: float = 1e-10
    """Mel power below this is clamped before the log, so digital silence stays finite."""

    def __post_init__(self) -> None:
        if self.n_fft <= 0 or not 0 < self.hop_length <= self.n_fft:
            raise ValueError(f"need n_fft > 0 and 0 < hop_length <= n_fft, got {self.n_fft}, {self.hop_length}")
        if not 1 <= self.n_ceps < self.n_mels:
            raise ValueError(f"need 1 <= n_ceps < n_mels, got n_ceps {self.n_ceps}, n_mels {self.n_mels}")
        if not self.power_floor > 0:
            raise ValueError(f"power_floor must be > 0, got {self.power_floor}")


def cepstra_from_log_mel(log_mel: np.ndarray) -> np.ndarray:
    """(T, M) natural-log mel amplitudes -> (T, M) cepstra c0..c_{M-1}, with L = c0 + Σ c_d cos(...)."""
    log_mel = np.asarray(log_mel, dtype=np.float64)
    m = log_mel.shape[-1]
    d = np.arange(m)[:, None]
    basis = np.cos(np.pi * d * (np.arange(m)[None, :] + 0.5) / m)  # (M coefficients, M bands)
    weights = np.full((m, 1), 2.0 / m)
    weights[0] = 1.0 / m
    return log_mel @ (basis * weights).T


def mel_cepstra(wav: np.ndarray, sample_rate: int, cfg: MelCepstrumConfig | None = None) -> np.ndarray:
    """Mono waveform -> (frames, D + 1) mel-cepstra c0..cD (centred Hann STFT, zero-padded ends)."""
    cfg = cfg or MelCepstrumConfig()
    wav = np.asarray(wav, dtype=np.float64)
    if wav.ndim != 1 or wav.size == 0:
        raise ValueError(f"mel_cepstra wants a non-empty mono 1-D waveform, got shape {wav.shape}")
    if not np.isfinite(wav).all():
        raise ValueError("mel_cepstra got a waveform with NaN or infinite samples")
    fb = mel_filterbank(sample_rate, cfg.n_fft, cfg.n_mels, 0.0, sample_rate / 2).astype(np.float64)  # (M, F)
    half = cfg.n_fft // 2
    padded = np.pad(wav, (half, half))
    if padded.size < cfg.n_fft:
        padded = np.pad(padded, (0, cfg.n_fft - padded.size))
    frames = np.lib.stride_tricks.sliding_window_view(padded, cfg.n_fft)[:: cfg.hop_length]  # (T, n_fft)
    power = np.abs(np.fft.rfft(frames * np.hanning(cfg.n_fft + 1)[:-1], axis=-1)) ** 2  # periodic Hann
    log_amplitude = 0.5 * np.log(np.maximum(power @ fb.T, cfg.power_floor))  # (T, M)
    return cepstra_from_log_mel(log_amplitude)[:, : cfg.n_ceps + 1]


def frame_mcd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Ta, Tb) MCD in dB between every frame of `a` and of `b`, both (T, D + 1) with c0 first (ignored)."""
    a, b = _cepstra(a, "a"), _cepstra(b, "b")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"cepstra differ in order: {a.shape[1] - 1} vs {b.shape[1] - 1} coefficients")
    a, b = a[:, 1:], b[:, 1:]
    out = np.empty((a.shape[0], b.shape[0]))
    rows = max(1, 2_000_000 // max(1, b.size))  # chunks keep the (rows, Tb, D) differences small
    for start in range(0, a.shape[0], rows):
        diff = a[start : start + rows, None, :] - b[None, :, :]  # exact: equal frames give exactly 0
        out[start : start + rows] = MCD_SCALE * np.sqrt(2.0 * np.einsum("ijd,ijd->ij", diff, diff))
    return out


def dtw_path(cost: np.ndarray) -> list[tuple[int, int]]:
    """The monotone path from (0, 0) to (Ta-1, Tb-1), steps (1,1), (1,0), (0,1), of least summed cost.

    Filled one anti-diagonal at a time (each needs only the two before it), so the dynamic
    programme is vectorised; ties go to the diagonal step, then to advancing `a`.
    """
    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim != 2 or 0 in cost.shape or not np.isfinite(cost).all():
        raise ValueError(f"dtw_path wants a non-empty finite 2-D cost matrix, got shape {cost.shape}")
    ta, tb = cost.shape
    acc = np.full((ta + 1, tb + 1), np.inf)  # acc[i + 1, j + 1]: least cost of a path ending at (i, j)
    acc[0, 0] = 0.0
    for k in range(ta + tb - 1):
        i = np.arange(max(0, k - tb + 1), min(k, ta - 1) + 1)
        j = k - i
        best = np.minimum(np.minimum(acc[i, j], acc[i, j + 1]), acc[i + 1, j])
        acc[i + 1, j + 1] = cost[i, j] + best
    path = [(ta - 1, tb - 1)]
    i, j = ta, tb
    while (i, j) != (1, 1):
        steps = ((i - 1, j - 1), (i - 1, j), (i, j - 1))
        i, j = min(steps, key=lambda s: acc[s])  # min keeps the first of equals: the diagonal
        path.append((i - 1, j - 1))
    return path[::-1]


def mcd_dtw_cepstra(a: np.ndarray, b: np.ndarray) -> float:
    """MCD-DTW in dB between two (T, D + 1) cepstra sequences (c0 first, ignored)."""
    cost = frame_mcd(a, b)
    path = dtw_path(cost)
    return float(np.mean([cost[i, j] for i, j in path]))


def mcd_dtw(reference: np.ndarray, generated: np.ndarray, sample_rate: int, cfg: MelCepstrumConfig | None = None) -> float:
    """MCD-DTW in dB between two mono waveforms at the same `sample_rate`."""
    return mcd_dtw_cepstra(mel_cepstra(reference, sample_rate, cfg), mel_cepstra(generated, sample_rate, cfg))


def _cepstra(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] < 2:
        raise ValueError(f"cepstra {name} must be (frames >= 1, c0 + at least one coefficient), got {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"cepstra {name} hold NaN or infinite values")
    return x
