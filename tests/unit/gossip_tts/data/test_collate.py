"""collate (whole clips, pad, masks) and DurationBatcher (similar lengths, frame budget, skipped clips)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossip_tts.data import BatcherConfig, CollateConfig, DurationBatcher, LatentSample, collate
from gossip_tts.data.collate import cut_by_budget

FR = 50.0


def sample(i: int, frames: int, ref_frames: int = 4, text: str | None = None, dim: int = 3) -> LatentSample:
    lat = np.arange(frames * dim, dtype=np.float32).reshape(frames, dim) + 1000 * i + 1  # never zero
    ref = -np.arange(ref_frames * dim, dtype=np.float32).reshape(ref_frames, dim) - 1
    return LatentSample(f"k{i}", lat, ref, text if text is not None else f"text {i}", "s", {"frame_rate": FR})


def test_padding_masks_and_seconds():
    cfg = CollateConfig(max_frames=100, max_ref_frames=100, max_text_bytes=100)
    ss = [sample(0, 5, 2, "ab"), sample(1, 9, 6, "héllo"), sample(2, 1, 3, "")]
    b = collate(ss, cfg, np.random.default_rng(0))
    assert b.latent.shape == (3, 9, 3) and b.latent.dtype == torch.float32
    assert b.latent_mask.dtype == torch.bool and b.latent_mask.sum(1).tolist() == [5, 9, 1]
    for i, s in enumerate(ss):
        n = s.frames
        assert torch.equal(b.latent[i, :n], torch.from_numpy(s.latent))
        assert torch.all(b.latent[i, n:] == 0) and not b.latent_mask[i, n:].any() and b.latent_mask[i, :n].all()
    assert b.ref.shape == (3, 6, 3) and b.ref_mask.sum(1).tolist() == [2, 6, 3]
    assert torch.all(b.ref[0, 2:] == 0) and torch.equal(b.ref[1], torch.from_numpy(ss[1].ref))
    assert b.text_ids.shape == (3, 6) and b.text_ids.dtype == torch.int64  # "héllo" is 6 UTF-8 bytes
    assert b.text_ids[0, :2].tolist() == [97, 98] and b.text_ids[0, 2:].tolist() == [0] * 4
    assert b.text_mask.sum(1).tolist() == [2, 6, 0]
    assert b.audio_seconds == pytest.approx(15 / FR)
    assert b.size == 3


def test_reference_is_cropped_but_target_clip_never_is():
    cfg = CollateConfig(max_frames=50, max_ref_frames=3, max_text_bytes=40)
    whole = sample(0, 50, 20, "a long text")
    for seed in range(5):
        b = collate([whole, sample(1, 5)], cfg, np.random.default_rng(seed))
        assert torch.equal(b.latent[0], torch.from_numpy(whole.latent)) and b.ref.shape[1] == 3
        assert b.text_mask[0].sum() == len("a long text")
    with pytest.raises(ValueError, match="audio_over_cap"):
        collate([sample(0, 51)], cfg, np.random.default_rng(0))
    with pytest.raises(ValueError, match="text_over_cap"):
        collate([sample(0, 5, text="x" * 41)], cfg, np.random.default_rng(0))


def test_every_batch_row_pairs_a_transcript_with_its_whole_clip():
    """Fails if any row holds part of a clip (a crop) or another clip's text."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(5, 200, size=120)
    samples = {f"text {i}": sample(i, int(n)) for i, n in enumerate(lengths)}
    cc = CollateConfig(max_frames=120, max_ref_frames=8, max_text_bytes=50)
    batcher = DurationBatcher(list(samples.values()), BatcherConfig(batch_size=6, bucket_size=24, collate=cc, seed=1))
    rows = 0
    for b in batcher:
        for i in range(b.size):
            text = bytes(b.text_ids[i, : int(b.text_mask[i].sum())].tolist()).decode()
            clip = samples[text].latent
            n = int(b.latent_mask[i].sum())
            assert n == clip.shape[0], f"{text!r}: {n} of its {clip.shape[0]} frames"
            np.testing.assert_array_equal(b.latent[i, :n].numpy(), clip)
            rows += 1
    over = int((lengths > 120).sum())
    assert over > 0 and batcher.skipped == {"audio_over_cap": over} and rows == len(lengths) - over


def test_frame_budget_caps_padded_frames_and_packs_short_clips():
    lengths = [4] * 20 + [90] * 6
    samples = [sample(i, n) for i, n in enumerate(lengths)]
    cc = CollateConfig(max_frames=100, max_ref_frames=8, max_text_bytes=50)
    batches = list(DurationBatcher(samples, BatcherConfig(batch_size=10, bucket_size=26, collate=cc, frame_budget=200)))
    assert all(b.size * b.latent.shape[1] <= 200 for b in batches)
    assert sorted(b.size for b in batches) == [2, 2, 2, 10, 10]
    assert cut_by_budget([1, 2, 3, 50, 60], batch_size=4, frame_budget=100) == [3, 1, 1]


def test_batcher_gives_up_when_no_clip_ever_fits():
    cc = CollateConfig(max_frames=10, max_ref_frames=8, max_text_bytes=50)
    endless = (sample(i, 20) for i in range(10**9))
    with pytest.raises(ValueError, match="raise --max-frames"):
        next(iter(DurationBatcher(endless, BatcherConfig(2, 4, cc, give_up_after=50))))


def test_collate_rejects_bad_input():
    cfg = CollateConfig(8, 8, 8)
    with pytest.raises(ValueError):
        collate([], cfg, np.random.default_rng(0))
    s = sample(0, 4)
    s.meta = {}
    with pytest.raises(ValueError, match="frame_rate"):
        collate([s], cfg, np.random.default_rng(0))
    with pytest.raises(ValueError):
        collate([sample(0, 4), sample(1, 4, dim=5)], cfg, np.random.default_rng(0))
    with pytest.raises(ValueError):
        CollateConfig(0, 8, 8)


def test_duration_batcher_groups_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 200, size=256)
    samples = [sample(i, int(n)) for i, n in enumerate(lengths)]
    cfg = BatcherConfig(batch_size=8, bucket_size=64, collate=CollateConfig(1000, 10, 50), seed=1)
    batches = list(DurationBatcher(samples, cfg))
    assert sum(b.size for b in batches) == 256 and all(b.size == 8 for b in batches)
    spread = np.mean([(b.latent_mask.sum(1).max() - b.latent_mask.sum(1).min()).item() for b in batches])
    # control: the same batches cut from the unsorted stream
    control = np.mean([np.ptp(lengths[i : i + 8]) for i in range(0, 256, 8)])
    assert spread < control / 4
    pad = sum((~b.latent_mask).sum().item() for b in batches)
    control_pad = sum(int((lengths[i : i + 8].max() - lengths[i : i + 8]).sum()) for i in range(0, 256, 8))
    assert pad < control_pad / 4
    firsts = [b.latent_mask.sum(1).min().item() for b in batches[:8]]
    assert firsts != sorted(firsts)  # batch order within a bucket is shuffled


def test_duration_batcher_remainders_and_drop_last():
    samples = [sample(i, 5 + i) for i in range(23)]
    cc = CollateConfig(100, 10, 10)
    sizes = [b.size for b in DurationBatcher(samples, BatcherConfig(4, 10, cc))]
    assert sum(sizes) == 23 and sizes.count(3) == 1 and all(s in (3, 4) for s in sizes)
    sizes = [b.size for b in DurationBatcher(samples, BatcherConfig(4, 10, cc, drop_last=True))]
    assert sizes == [4] * 5
    with pytest.raises(ValueError):
        BatcherConfig(8, 4, cc)


class _Counting:
    """A sample stream that records how many samples were taken from it."""

    def __init__(self, samples: list[LatentSample]) -> None:
        self.samples, self.taken = samples, 0

    def __iter__(self):
        for s in self.samples:
            self.taken += 1
            yield s


def test_a_bucket_is_batched_once_its_samples_fill_the_byte_budget():
    samples = [sample(i, 10, ref_frames=2000) for i in range(64)]  # each holds ~24 kB, mostly reference
    per_sample = samples[0].nbytes
    cc = CollateConfig(100, 10, 10)
    stream = _Counting(samples)
    batches = iter(DurationBatcher(stream, BatcherConfig(4, 64, cc, bucket_bytes=6 * per_sample)))
    first = next(batches)
    assert stream.taken == 6 and first.size in (2, 4)  # cut at 6 samples, not 64; nothing carried over
    assert sum(b.size for b in batches) + first.size == 64
    control = _Counting(samples)  # by count only, the whole bucket is held first
    next(iter(DurationBatcher(control, BatcherConfig(4, 64, cc))))
    assert control.taken == 64
    with pytest.raises(ValueError, match="bucket_bytes"):
        BatcherConfig(4, 64, cc, bucket_bytes=0)
