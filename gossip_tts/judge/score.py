"""Scoring a set of clips: per clip what the ears heard and how close it is, then the set's totals.

Decisions only: the ears are passed in, so the same code scores real models and test doubles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .clips import Clip
from .ears import Ears
from .text_errors import ErrorCount, char_errors, total, word_errors


@dataclass(frozen=True)
class ClipScore:
    key: str
    heard: str
    words: ErrorCount
    chars: ErrorCount
    similarity: float | None
    """Cosine to the target voice; None without reference clips."""
    dnsmos: float


@dataclass(frozen=True)
class SetScore:
    """One row of the judge's table: a named set of clips and its overall figures."""

    name: str
    clips: tuple[ClipScore, ...]

    @property
    def wer(self) -> float:
        return total([c.words for c in self.clips]).rate

    @property
    def cer(self) -> float:
        return total([c.chars for c in self.clips]).rate

    @property
    def similarity(self) -> float | None:
        values = [c.similarity for c in self.clips if c.similarity is not None]
        return float(np.mean(values)) if values else None

    @property
    def dnsmos(self) -> float:
        return float(np.mean([c.dnsmos for c in self.clips]))

    def overall(self) -> dict[str, float | int | None]:
        """The figures of the `judge: {json}` line, rounded to what the ears can tell apart."""
        sim = self.similarity
        return {"clips": len(self.clips), "wer": round(self.wer, 4), "cer": round(self.cer, 4),
                "similarity": None if sim is None else round(sim, 4), "dnsmos": round(self.dnsmos, 4)}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / norm) if norm > 0 else 0.0


def voice_of(ears: Ears, references: list[np.ndarray]) -> np.ndarray | None:
    """The target voice: the mean embedding of its reference clips (None without any)."""
    if not references:
        return None
    return np.mean([ears.embed(wav) for wav in references], axis=0)


def score_clip(ears: Ears, clip: Clip, voice: np.ndarray | None) -> ClipScore:
    heard = ears.transcribe(clip.wav)
    similarity = None if voice is None else cosine(ears.embed(clip.wav), voice)
    return ClipScore(clip.key, heard, word_errors(clip.text, heard), char_errors(clip.text, heard),
                     similarity, ears.quality(clip.wav))


Progress = Callable[[str, int, int, ClipScore], None]
"""Told after each clip: the set's name, the clip's number (from 1), the set's size, its score."""


def score_set(name: str, ears: Ears, clips: list[Clip], voice: np.ndarray | None,
              progress: Progress | None = None) -> SetScore:
    """Every clip scored in order; `progress` hears of each as it is done (a clip takes seconds on a CPU)."""
    scores = []
    for i, clip in enumerate(clips, 1):
        scores.append(score_clip(ears, clip, voice))
        if progress is not None:
            progress(name, i, len(clips), scores[-1])
    return SetScore(name, tuple(scores))
