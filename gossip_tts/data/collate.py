"""Turning LatentSamples into padded, masked Batches of whole clips, grouped by duration.

A clip is never cropped: its transcript describes the whole clip, so a window of it would be
trained on words it does not contain. A clip longer than `max_frames` (or whose text is longer
than `max_text_bytes`) is skipped and counted instead, and the model's position limit is set
to the same `max_frames`, so every position it is asked for at synthesis was trained.

Only the speaker reference (another clip of the same speaker) is cropped: it carries a voice,
not words. Batches hold up to `batch_size` clips and at most `frame_budget` padded frames
(clips × longest), so a batch of short clips is as big as memory allows and a batch of long
ones stays within it; DurationBatcher sorts a bucket by length first so little is padding.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generator, Iterable, Iterator

import numpy as np

from gossip_tts.data.batch import Batch
from gossip_tts.data.sample import LatentSample
from gossip_tts.data.text import TEXT_FRONTENDS, encode_text

if TYPE_CHECKING:  # imported where used: the data package imports without torch (the settings read it at --help)
    import torch


@dataclass
class CollateConfig:
    """Caps on what one batch row may hold."""

    max_frames: int
    """Longest target clip, in latent frames; a longer clip is refused, never cropped."""
    max_ref_frames: int
    """Speaker reference latents longer than this are cropped at a random offset."""
    max_text_bytes: int
    """Longest text, in byte ids after the front end; a longer one is refused, never cut."""
    text_frontend: str = "bytes"
    """How text becomes byte ids: "bytes" (UTF-8) or "echo" (Echo TTS's front end)."""

    def __post_init__(self) -> None:
        for name in ("max_frames", "max_ref_frames", "max_text_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"CollateConfig.{name} must be a positive int, got {v!r}")
        if self.text_frontend not in TEXT_FRONTENDS:
            raise ValueError(f"CollateConfig.text_frontend must be one of {TEXT_FRONTENDS}, got {self.text_frontend!r}")


def skip_reason(sample: LatentSample, cfg: CollateConfig) -> str | None:
    """Why `sample` cannot be trained on whole under `cfg` ("audio_over_cap", "text_over_cap"), else None."""
    if sample.frames > cfg.max_frames:
        return "audio_over_cap"
    if len(encode_text(sample.text, cfg.text_frontend)) > cfg.max_text_bytes:
        return "text_over_cap"
    return None


def _crop(a: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if a.shape[0] <= n:
        return a
    start = int(rng.integers(0, a.shape[0] - n + 1))
    return a[start : start + n]


def _pad(rows: list[np.ndarray], dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    length = max(r.shape[0] for r in rows)
    out = np.zeros((len(rows), length, dim), dtype=np.float32)
    mask = np.zeros((len(rows), length), dtype=bool)
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
        mask[i, : r.shape[0]] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def _check(s: LatentSample, dim: int, cfg: CollateConfig) -> float:
    """Validates one sample and returns its frame rate."""
    if s.latent.ndim != 2 or s.ref.ndim != 2 or s.latent.shape[1] != dim or s.ref.shape[1] != dim:
        raise ValueError(f"sample {s.key!r}: latent {s.latent.shape} / ref {s.ref.shape} do not match dim {dim}")
    if s.latent.shape[0] == 0 or s.ref.shape[0] == 0:
        raise ValueError(f"sample {s.key!r} has an empty latent or reference")
    fr = s.meta.get("frame_rate")
    if not isinstance(fr, (int, float)) or not fr > 0:
        raise ValueError(f"sample {s.key!r}: meta['frame_rate'] is missing or not positive ({fr!r})")
    reason = skip_reason(s, cfg)
    if reason is not None:
        raise ValueError(f"sample {s.key!r} is over a cap ({reason}); filter with skip_reason() first")
    return float(fr)


def collate(samples: list[LatentSample], cfg: CollateConfig, rng: np.random.Generator) -> Batch:
    """Pad and stack whole clips; masks are True on real frames and padding is zero.

    Each sample needs `meta["frame_rate"]` (the reader always sets it) to count
    `audio_seconds`. A sample over a cap raises: callers filter with `skip_reason`.
    """
    import torch

    if not samples:
        raise ValueError("collate needs at least one sample")
    dim = int(samples[0].latent.shape[1])
    seconds = sum(s.frames / _check(s, dim, cfg) for s in samples)
    latent, latent_mask = _pad([s.latent for s in samples], dim)
    ref, ref_mask = _pad([_crop(s.ref, cfg.max_ref_frames, rng) for s in samples], dim)
    texts = [encode_text(s.text, cfg.text_frontend) for s in samples]
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
    """Most clips in one batch."""
    bucket_size: int
    """Samples gathered, then sorted by length and cut into batches (>= batch_size)."""
    collate: CollateConfig
    """Caps applied to every clip (over-cap clips are skipped and counted)."""
    seed: int = 0
    """Seeds reference crop offsets and the order batches leave a bucket."""
    drop_last: bool = False
    """Drop the final short batch when the stream ends."""
    frame_budget: int | None = None
    """Most padded frames in one batch (clips × longest); None: batch_size × max_frames."""
    bucket_bytes: int | None = None
    """Also cut a bucket once its samples hold this many bytes (`DataLimits.bucket_bytes`);
    None: by count only."""
    give_up_after: int = 4096
    """Raise if this many clips in a row were skipped and none ever fitted (a looping stream
    would otherwise spin for ever on caps no clip meets)."""

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")
        if self.bucket_size < self.batch_size:
            raise ValueError(f"bucket_size ({self.bucket_size}) must be >= batch_size ({self.batch_size})")
        if not isinstance(self.collate, CollateConfig):
            raise TypeError(f"collate must be a CollateConfig, got {type(self.collate).__name__}")
        if self.frame_budget is None:
            self.frame_budget = self.batch_size * self.collate.max_frames
        if self.frame_budget < self.collate.max_frames:
            raise ValueError(f"frame_budget ({self.frame_budget}) must hold one clip of max_frames ({self.collate.max_frames})")
        if self.bucket_bytes is not None and self.bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be positive, got {self.bucket_bytes}")
        if self.give_up_after <= 0:
            raise ValueError(f"give_up_after must be positive, got {self.give_up_after}")


def cut_by_budget(lengths: list[int], batch_size: int, frame_budget: int) -> list[int]:
    """Sizes of consecutive groups of ascending `lengths`: each holds at most `batch_size`
    clips and at most `frame_budget` padded frames (count × its last, longest, length)."""
    sizes: list[int] = []
    n = 0
    for length in lengths:
        if n and (n + 1 > batch_size or (n + 1) * length > frame_budget):
            sizes.append(n)
            n = 0
        n += 1
    if n:
        sizes.append(n)
    return sizes


class DurationBatcher:
    """Batches of whole, similar-length clips: fill a bucket, sort by frames, cut by the frame
    budget, shuffle batch order.

    Shuffling the batches of a bucket keeps the model from seeing lengths rise steadily within
    each bucket. `skipped` counts clips left out, by reason. With a looping stream this
    iterates for ever.
    """

    def __init__(self, stream: Iterable[LatentSample], cfg: BatcherConfig) -> None:
        self.stream = stream
        self.cfg = cfg
        self.skipped: Counter[str] = Counter()

    def _fitting(self) -> Iterator[LatentSample]:
        streak, fitted = 0, False
        for sample in self.stream:
            reason = skip_reason(sample, self.cfg.collate)
            if reason is None:
                streak, fitted = 0, True
                yield sample
                continue
            self.skipped[reason] += 1
            streak += 1
            if not fitted and streak >= self.cfg.give_up_after:
                c = self.cfg.collate
                raise ValueError(
                    f"the first {streak} clips are all over the caps (max_frames {c.max_frames}, "
                    f"max_text_bytes {c.max_text_bytes}; skipped {dict(self.skipped)}): raise --max-frames"
                )

    def __iter__(self) -> Iterator[Batch]:
        rng = np.random.default_rng(self.cfg.seed)
        bucket: list[LatentSample] = []
        held = 0
        cap_bytes = self.cfg.bucket_bytes
        for sample in self._fitting():
            bucket.append(sample)
            held += sample.nbytes
            if len(bucket) >= self.cfg.bucket_size:
                bucket = yield from self._flush(bucket, rng, final=False)
                held = sum(s.nbytes for s in bucket)
            elif cap_bytes is not None and held >= cap_bytes:  # large samples: batch them all now, carry nothing
                bucket = yield from self._flush(bucket, rng, final=False, carry=False)
                held = 0
        if bucket:
            yield from self._flush(bucket, rng, final=True)

    def _flush(
        self, bucket: list[LatentSample], rng: np.random.Generator, final: bool, carry: bool = True
    ) -> Generator[Batch, None, list[LatentSample]]:
        """Yields the bucket's batches; returns the samples carried to the next bucket.

        Mid-stream, the last group (not closed by the size or frame cap) waits for the next
        bucket instead of making a short batch, unless `carry` is False (a bucket cut by its
        byte budget must not keep growing).
        """
        bucket = sorted(bucket, key=lambda s: s.frames)
        sizes = cut_by_budget([s.frames for s in bucket], self.cfg.batch_size, int(self.cfg.frame_budget or 0))
        starts = np.cumsum([0, *sizes])
        groups = [bucket[a:b] for a, b in zip(starts[:-1], starts[1:])]
        carried: list[LatentSample] = []
        if len(groups[-1]) < self.cfg.batch_size and ((carry and not final) or (final and self.cfg.drop_last)):
            last = groups.pop()
            carried = [] if final else last
        for j in rng.permutation(len(groups)):
            yield collate(groups[int(j)], self.cfg.collate, rng)
        return carried
