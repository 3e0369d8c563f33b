"""Wav files in and out, and sample-rate conversion, shared by every codec and `pack`.

Everything here works on mono float32 arrays in [-1, 1]: codecs see one channel, so
channels are averaged on read rather than at each call site.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torch.nn.functional as F


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Read an audio file as mono float32 in [-1, 1]; returns `(wav, sample_rate)`.

    Raises FileNotFoundError for a missing file and ValueError for one soundfile cannot
    decode, so callers such as `pack` can skip and count a bad clip without catching
    library-specific exceptions.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"audio file not found: {path}")
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise ValueError(f"cannot read audio file {path}: {e}") from e
    wav = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    return np.ascontiguousarray(wav, dtype=np.float32), int(sr)


def write_wav(path: str | Path, wav: np.ndarray, sr: int, subtype: str = "PCM_16") -> Path:
    """Write a mono float waveform, clipped to [-1, 1] so that PCM never wraps around."""
    path = Path(path)
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim != 1:
        raise ValueError(f"write_wav wants a mono 1-D waveform, got shape {wav.shape}")
    if sr <= 0:
        raise ValueError(f"sample rate must be positive, got {sr}")
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), np.clip(wav, -1.0, 1.0), int(sr), subtype=subtype)
    return path


@lru_cache(maxsize=16)
def _sinc_kernel(orig: int, new: int, width_zeros: int, rolloff: float) -> tuple[torch.Tensor, int]:
    """Polyphase windowed-sinc filter bank: one `new`-long set of phases of a low-pass FIR.

    The cut-off sits at `rolloff` times the lower Nyquist so both up- and down-sampling
    are alias-free; a Hann window over `width_zeros` sinc zero-crossings each side keeps
    the kernel short.
    """
    base = min(orig, new) * rolloff
    width = math.ceil(width_zeros * orig / base)
    idx = torch.arange(-width, width + orig, dtype=torch.float64) / orig
    t = (-torch.arange(new, dtype=torch.float64) / new)[:, None] + idx[None, :]
    t = (t * base).clamp(-width_zeros, width_zeros)
    window = torch.cos(t * math.pi / width_zeros / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t)
    kernel = (sinc * window * (base / orig)).to(torch.float32)
    return kernel[:, None, :], width


def resample(wav: np.ndarray, orig_sr: int, new_sr: int, *, width_zeros: int = 16, rolloff: float = 0.95) -> np.ndarray:
    """Change the sample rate of a mono waveform with a polyphase windowed-sinc filter.

    Output length is `ceil(len(wav) * new_sr / orig_sr)`. Rates are reduced by their gcd
    first, so 44100 -> 22050 is a 2:1 filter, not a 44100-phase one.
    """
    if orig_sr <= 0 or new_sr <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_sr} -> {new_sr}")
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim != 1:
        raise ValueError(f"resample wants a mono 1-D waveform, got shape {wav.shape}")
    if orig_sr == new_sr or wav.size == 0:
        return wav.copy()
    g = math.gcd(orig_sr, new_sr)
    orig, new = orig_sr // g, new_sr // g
    kernel, width = _sinc_kernel(orig, new, width_zeros, rolloff)
    x = torch.from_numpy(wav)[None, None, :]
    x = F.pad(x, (width, width + orig))
    y = F.conv1d(x, kernel, stride=orig)  # (1, new, frames): one row per output phase
    y = y[0].t().reshape(-1)
    out_len = math.ceil(new * wav.size / orig)
    return y[:out_len].numpy().astype(np.float32, copy=False)
