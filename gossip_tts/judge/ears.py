"""The seam between the judge and the models that listen: an ASR, a speaker encoder and a MOS
predictor. The judge decides on what they return; `PackagedEars` (the `[judge]` extra) is the
one real implementation, and tests substitute their own.

Every ear takes mono float32 audio at `EAR_RATE` (16 kHz, what all three models were trained
on), so resampling happens once, in the judge, with the project's own resampler.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

EAR_RATE = 16000
"""Sample rate every ear listens at."""


class Ears(ABC):
    """What the judge asks of its listeners; each answer must depend only on the clip given."""

    name: str
    """Which models these are, printed with the figures."""

    @abstractmethod
    def transcribe(self, wav: np.ndarray) -> str:
        """The words heard in `wav` (16 kHz), as plain text."""

    @abstractmethod
    def embed(self, wav: np.ndarray) -> np.ndarray:
        """A speaker embedding of `wav` (16 kHz): 1-D float, compared by cosine."""

    @abstractmethod
    def quality(self, wav: np.ndarray) -> float:
        """A mean-opinion-score estimate of `wav` (16 kHz), 1 (bad) to 5 (excellent)."""

    def identity(self) -> str:
        """Everything the answers depend on besides the clip (models, their versions, settings):
        answers kept on disk are keyed by it. The name, for ears whose answers never change."""
        return self.name


EXTRA_HINT = "pip install 'gossip-tts[judge]'"


def missing_extra(package: str) -> ImportError:
    """The one-line error for a judge package that is not installed."""
    return ImportError(f"gossip-tts judge needs the [judge] extra ({package} is not installed): {EXTRA_HINT}")
