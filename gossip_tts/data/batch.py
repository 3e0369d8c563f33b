"""The padded batch every part of the TTS stack agrees on (data -> model -> loss)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the data package imports without torch (the settings read DataLimits from it at --help)
    import torch


@dataclass
class Batch:
    """A padded, masked batch of latent clips with their text and speaker reference.

    Masks are True on real positions; padded positions hold zeros so that a model which
    honours the masks gives the same output on real frames whatever the padding.
    """

    latent: torch.Tensor  # (B, T, D) float32, target audio latents (x0)
    latent_mask: torch.Tensor  # (B, T) bool
    text_ids: torch.Tensor  # (B, L) int64, UTF-8 bytes; 0 where padded
    text_mask: torch.Tensor  # (B, L) bool
    ref: torch.Tensor  # (B, R, D) float32, speaker reference latents
    ref_mask: torch.Tensor  # (B, R) bool
    audio_seconds: float  # total real audio in the batch, for throughput reports

    @property
    def size(self) -> int:
        return int(self.latent.shape[0])

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(
            latent=self.latent.to(device, non_blocking=True),
            latent_mask=self.latent_mask.to(device, non_blocking=True),
            text_ids=self.text_ids.to(device, non_blocking=True),
            text_mask=self.text_mask.to(device, non_blocking=True),
            ref=self.ref.to(device, non_blocking=True),
            ref_mask=self.ref_mask.to(device, non_blocking=True),
            audio_seconds=self.audio_seconds,
        )

