"""The one interface every audio codec implements: waveform <-> latent frames."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class Codec(ABC):
    """Turns audio into a (T, D) latent sequence and back.

    Shards record `name`, `latent_dim` and `frame_rate`, so that a run never mixes latents
    from two different codecs.
    """

    name: str
    latent_dim: int
    frame_rate: float  # latent frames per second of audio
    sample_rate: int  # rate of the waveform `decode` returns

    @abstractmethod
    def encode(self, wav: np.ndarray, sr: int) -> np.ndarray:
        """Mono float waveform at `sr` Hz -> (T, latent_dim) float32 latents."""

    @abstractmethod
    def decode(self, latent: np.ndarray) -> np.ndarray:
        """(T, latent_dim) latents -> mono float32 waveform at `self.sample_rate`."""
