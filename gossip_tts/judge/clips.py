"""The clips a judge listens to: the folder judged, and the controls built from the real recordings.

Controls bound the figures from both sides, so a number means something on its own:
- real: the recordings of the same sentences (the ceiling: what the ears score on the voice itself);
- codec: those recordings through the codec's encode and decode (what the codec alone costs, the
  best a model that speaks through it can reach);
- noise: seeded white noise as long as each clip (the floor: what saying nothing scores).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gossip_tts.audio import read_wav, resample
from gossip_tts.audio.base import Codec
from gossip_tts.audio.pack import read_metadata

from .ears import EAR_RATE

NOISE_LEVEL = 0.1
"""Standard deviation of the noise floor's samples (full scale is 1)."""


@dataclass(frozen=True)
class Clip:
    """One clip at the ears' rate, with the sentence it should say."""

    key: str
    text: str
    wav: np.ndarray


def to_ear_rate(wav: np.ndarray, sr: int) -> np.ndarray:
    return resample(np.asarray(wav, dtype=np.float32), sr, EAR_RATE)


def read_clip_audio(path: Path) -> tuple[np.ndarray, int]:
    """A wav as (mono float32, rate); refuses an empty or non-finite one with its path."""
    wav, sr = read_wav(path)
    if wav.size == 0 or not np.isfinite(wav).all():
        raise ValueError(f"{path}: {'empty' if wav.size == 0 else 'non-finite'} audio cannot be judged")
    return wav, sr


def read_folder(folder: Path) -> list[Clip]:
    """Every usable clip of an LJSpeech-style folder (the rows `pack` would take), in id order."""
    skipped: list[tuple[str, str]] = []
    rows = read_metadata(Path(folder), skipped)
    if not rows:
        raise ValueError(f"{folder} has no usable clips (metadata.csv rows with a wavs/<id>.wav)")
    return [Clip(row.key, row.text, to_ear_rate(*read_clip_audio(row.wav))) for row in rows]


def read_references(paths: list[Path]) -> list[np.ndarray]:
    return [to_ear_rate(*read_clip_audio(Path(p))) for p in paths]


def matching_real(judged: list[Clip], real_folder: Path) -> tuple[list[Clip], list[tuple[np.ndarray, int]]]:
    """The real recordings of the judged clips' ids, with the judged texts, plus their raw audio.

    Returns (clips at the ears' rate, raw (wav, sr) pairs for the codec); ids the real folder lacks
    are left out, and a real folder sharing none is refused.
    """
    skipped: list[tuple[str, str]] = []
    rows = {row.key: row for row in read_metadata(Path(real_folder), skipped)}
    shared = [clip for clip in judged if clip.key in rows]
    if not shared:
        raise ValueError(f"{real_folder} holds none of the judged clips' ids ({judged[0].key}, ...)")
    raw = [read_clip_audio(rows[clip.key].wav) for clip in shared]
    return [Clip(clip.key, clip.text, to_ear_rate(*audio)) for clip, audio in zip(shared, raw)], raw


def codec_round_trip(real: list[Clip], raw: list[tuple[np.ndarray, int]], codec: Codec) -> list[Clip]:
    """The real recordings after the codec's encode and decode."""
    return [Clip(clip.key, clip.text, to_ear_rate(codec.decode(codec.encode(wav, sr)), codec.sample_rate))
            for clip, (wav, sr) in zip(real, raw)]


def noise_like(clips: list[Clip], seed: int) -> list[Clip]:
    """Seeded white noise as long as each clip, keeping its sentence."""
    rng = np.random.default_rng(seed)
    return [Clip(clip.key, clip.text, (NOISE_LEVEL * rng.standard_normal(clip.wav.size)).astype(np.float32))
            for clip in clips]
