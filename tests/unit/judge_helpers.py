"""A stand-in for the judge's listeners, so tests of what the judge decides need no [judge] extra."""

from __future__ import annotations

import numpy as np

from gossip_tts.judge import Ears


class LoudnessEars(Ears):
    """Hears the text "loud" in any clip with RMS over 0.05, embeds (RMS, peak), rates by RMS."""

    name = "stand-in"

    def __init__(self) -> None:
        self.heard: list[int] = []

    def transcribe(self, wav: np.ndarray) -> str:
        self.heard.append(wav.size)
        return "loud" if np.sqrt(np.mean(wav**2)) > 0.05 else ""

    def embed(self, wav: np.ndarray) -> np.ndarray:
        return np.array([np.sqrt(np.mean(wav**2)), np.abs(wav).max()])

    def quality(self, wav: np.ndarray) -> float:
        return 1.0 + float(np.sqrt(np.mean(wav**2)))
