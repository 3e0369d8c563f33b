"""Turning LatentSamples into padded, masked Batches, and grouping similar lengths together.

Long clips are cropped at a random offset (from the caller's rng, so a run is
reproducible) rather than dropped; batches are padded only to their own longest member,
and DurationBatcher sorts a bucket of samples by length first so little compute is spent
on padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generator, Iterable, Iterator

import numpy as np
import torch

from gossip_tts.data.batch import Batch, encode_text
from gossip_tts.data.sample import LatentSample


@dataclass
class CollateConfig:
    """Caps on what one batch row may hold."""

    max_frames: int
    """Target latents longer than this are cropped at a random offset."""
    max_ref_frames: int
    """Speaker reference latents longer than this are cropped at a random offset."""
    max_text_bytes: int
    """UTF-8 bytes of text kept (the rest is cut)."""

    def __post_init__(self) -> None:
        for name in ("max_frames", "max_ref_frames", "max_text_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"CollateConfig.{name} must be a positive int, got {v!r}")


def _crop(a: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if a.shape[0] <= n:
        return a
    start = int(rng.integers(0, a.shape[0] - n + 1))
    return a[start : start + n]


def _pad(rows: list[np.ndarray], dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(r.shape[0] for r in rows)
    out = np.zeros((len(rows), length, dim), dtype=np.float32)
    mask = np.zeros((len(rows), length), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
        mask[i, : r.shape[0]] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def collate(samples: list[LatentSample], cfg: CollateConfig, rng: np.random.Generator) -> Batch:
    """Crop, pad and stack `samples`; masks are True on real frames and padding is zero.

    Each sample needs `meta["frame_rate"]` (the reader always sets it) to count
    `audio_seconds`, the real audio seconds left after cropping.
    """
    if not samples:
        raise ValueError("collate needs at least one sample")
    dim = int(samples[0].latent.shape[1])
    latents, refs, texts = [], [], []
    seconds = 0.0
    for s in samples:
        if s.latent.ndim != 2 or s.ref.ndim != 2 or s.latent.shape[1] != dim or s.ref.shape[1] != dim:
            raise ValueError(f"sample {s.key!r}: latent {s.latent.shape} / ref {s.ref.shape} do not match dim {dim}")
        if s.latent.shape[0] == 0 or s.ref.shape[0] == 0:
            raise ValueError(f"sample {s.key!r} has an empty latent or reference")
        fr = s.meta.get("frame_rate")
        if not isinstance(fr, (int, float)) or not fr > 0:
            raise ValueError(f"sample {s.key!r}: meta['frame_rate'] is missing or not positive ({fr!r})")
        lat = _crop(s.latent, cfg.max_frames, rng)
        latents.append(lat)
        refs.append(_crop(s.ref, cfg.max_ref_frames, rng))
        texts.append(encode_text(s.text, cfg.max_text_bytes))
        seconds += lat.shape[0] / float(fr)
    latent, latent_mask = _pad(latents, dim)
    ref, ref_mask = _pad(refs, dim)
    width = max(1, max(len(t) for t in texts))  # keep a column even when every text is empty
    text_ids = torch.zeros((len(texts), width), dtype=torch.int64)
    text_mask = torch.zeros((len(texts), width), dtype=torch.bool)
    for i, t in enumerate(texts):
        text_ids[i, : len(t)] = torch.tensor(t, dtype=torch.int64)
        text_mask[i, : len(t)] = True
    return Batch(latent, latent_mask, text_ids, text_mask, ref, ref_mask, audio_seconds=seconds)


@dataclass
class BatcherConfig:
    """How DurationBatcher groups samples."""

    batch_size: int
    """Samples per batch."""
    bucket_size: int
    """Samples gathered, then sorted by length and cut into batches (>= batch_size)."""
    collate: CollateConfig
    """Crop/pad caps applied to every batch."""
    seed: int = 0
    """Seeds crop offsets and the order batches leave a bucket."""
    drop_last: bool = False
    """Drop the final short batch when the stream ends."""

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")
        if self.bucket_size < self.batch_size:
            raise ValueError(f"bucket_size ({self.bucket_size}) must be >= batch_size ({self.batch_size})")
        if not isinstance(self.collate, CollateConfig):
            raise TypeError(f"collate must be a CollateConfig, got {type(self.collate).__name__}")


class DurationBatcher:
    """Batches of similar-length samples: fill a bucket, sort it by frames, cut, shuffle batch order.

    Shuffling the batches of a bucket keeps the model from seeing lengths rise steadily
    within each bucket. With a looping stream this iterates for ever.
    """

    def __init__(self, stream: Iterable[LatentSample], cfg: BatcherConfig) -> None:
        self.stream = stream
        self.cfg = cfg

    def __iter__(self) -> Iterator[Batch]:
        rng = np.random.default_rng(self.cfg.seed)
        bucket: list[LatentSample] = []
        for sample in self.stream:
            bucket.append(sample)
            if len(bucket) >= self.cfg.bucket_size:
                bucket = yield from self._flush(bucket, rng, final=False)
        if bucket:
            yield from self._flush(bucket, rng, final=True)

    def _flush(
        self, bucket: list[LatentSample], rng: np.random.Generator, final: bool
    ) -> Generator[Batch, None, list[LatentSample]]:
        """Yields the bucket's batches; returns the samples carried to the next bucket.

        Mid-stream, a remainder short of a whole batch waits for the next bucket instead
        of making a short batch.
        """
        bucket = sorted(bucket, key=lambda s: s.frames)
        bs = self.cfg.batch_size
        groups = [bucket[i : i + bs] for i in range(0, len(bucket), bs)]
        carry: list[LatentSample] = []
        if len(groups[-1]) < bs:
            if not final:
                carry = groups.pop()
            elif self.cfg.drop_last:
                groups.pop()
        for j in rng.permutation(len(groups)):
            yield collate(groups[int(j)], self.cfg.collate, rng)
        return carry
