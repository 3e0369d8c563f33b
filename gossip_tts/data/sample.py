"""One training example as stored in a latent tar, and the codec facts a shard records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CodecInfo:
    """Which latent space a shard lives in; a run refuses shards whose info differs."""

    codec: str
    latent_dim: int
    frame_rate: float

    def describe(self) -> str:
        """In words, as logs show it: `codec mel, 128 dims at 86.13 frames/s`."""
        return f"codec {self.codec}, {self.latent_dim} dims at {self.frame_rate:.2f} frames/s"


@dataclass
class LatentSample:
    key: str
    latent: np.ndarray  # (T, D) audio latents
    ref: np.ndarray  # (T', D) reference latents from another clip of the same speaker
    text: str
    speaker: str
    meta: dict[str, Any] = field(default_factory=dict)  # everything else from key.json

    @property
    def frames(self) -> int:
        return int(self.latent.shape[0])

    @property
    def nbytes(self) -> int:
        """Memory the sample holds, near enough to bound buffers by (arrays plus text)."""
        return int(self.latent.nbytes) + int(self.ref.nbytes) + len(self.text)
