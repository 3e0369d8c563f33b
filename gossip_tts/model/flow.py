"""Rectified-flow objective: x_t = (1−t)·x0 + t·ε, the model regresses the velocity ε − x0.

All randomness (t, noise, condition dropout) comes from an explicit CPU generator, so a loss is
reproducible from (batch, seed) on any device.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import torch
from torch import Tensor

from gossip_tts.data.batch import Batch


class VelocityModel(Protocol):
    """Anything called like `EchoDiT.forward` (tests pass stand-ins)."""

    def __call__(
        self, x_t: Tensor, t: Tensor, text_ids: Tensor, text_mask: Tensor, ref: Tensor, ref_mask: Tensor,
        x_mask: Tensor | None = None,
    ) -> Tensor: ...


def sample_t(batch_size: int, generator: torch.Generator, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Logit-normal t (batch_size,) in (0, 1), stratified: one uniform draw in each of
    `batch_size` equal bins (shuffled), pushed through Φ⁻¹ then the sigmoid.

    Stratifying keeps every batch spread over the whole t range, which lowers the variance of the
    loss compared with i.i.d. draws; logit-normal puts more weight on the middle t where the
    velocity is hardest to predict.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    jitter = torch.rand(batch_size, generator=generator, dtype=torch.float64)
    u = ((torch.arange(batch_size, dtype=torch.float64) + jitter) / batch_size).clamp(1e-7, 1 - 1e-7)  # (B,)
    u = u[torch.randperm(batch_size, generator=generator)]  # no sample is always the low-t one
    z = mean + std * (2.0**0.5) * torch.erfinv(2 * u - 1)  # Φ⁻¹(u)
    return torch.sigmoid(z).float()


def frame_major_noise(shape: torch.Size | tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Standard normal noise of shape (B, T, D) drawn frame by frame (T, B, D order), so extra
    right padding only appends draws: the noise on real frames, and so the loss, is the same
    whatever the padded length."""
    b, t, d = shape
    return torch.randn(t, b, d, generator=generator).transpose(0, 1)


def masked_mse(pred: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """Mean squared error over real frames (mask (B, T) True) and all channels."""
    m = mask[..., None].to(torch.float32)  # (B, T, 1)
    se = ((pred.float() - target.float()) ** 2 * m).sum()
    return se / (m.sum() * pred.shape[-1]).clamp(min=1.0)


def flow_matching_loss(
    model: VelocityModel,
    batch: Batch,
    generator: torch.Generator,
    text_dropout: float = 0.1,
    speaker_dropout: float = 0.1,
    t: Tensor | None = None,
) -> Tensor:
    """Masked rectified-flow MSE of one batch, with per-sample text and speaker dropout.

    The two dropouts are drawn independently, so every branch either sampler uses is trained:
    (∅,S) and (T,∅) for Echo's independent guidance, each with probability p·(1−q) (0.09 at
    the default 0.1/0.1), and (∅,∅) for the nested form with p·q (0.01).

    Draw order is fixed (noise, text drop, speaker drop, then t unless given), so passing `t`
    leaves the noise and dropout unchanged. Dropout zeroes the whole text_mask / ref_mask of a
    sample: the model learns the unconditional velocities that guidance needs.
    """
    if not (0.0 <= text_dropout <= 1.0 and 0.0 <= speaker_dropout <= 1.0):
        raise ValueError(f"dropout must be in [0, 1], got text={text_dropout}, speaker={speaker_dropout}")
    x0 = batch.latent  # (B, T, D)
    b, device = x0.shape[0], x0.device
    noise = frame_major_noise(x0.shape, generator).to(device=device, dtype=x0.dtype)  # (B, T, D)
    drop_text = (torch.rand(b, generator=generator) < text_dropout).to(device)  # (B,)
    drop_speaker = (torch.rand(b, generator=generator) < speaker_dropout).to(device)  # (B,)
    if t is None:
        t = sample_t(b, generator)
    t = t.to(device=device, dtype=x0.dtype)
    if t.shape != (b,):
        raise ValueError(f"t must have shape ({b},), got {tuple(t.shape)}")

    tt = t[:, None, None]  # (B, 1, 1)
    x_t = (1 - tt) * x0 + tt * noise
    pred = model(
        x_t, t, batch.text_ids, batch.text_mask & ~drop_text[:, None],
        batch.ref, batch.ref_mask & ~drop_speaker[:, None], batch.latent_mask,
    )
    return masked_mse(pred, noise - x0, batch.latent_mask)


@torch.no_grad()
def eval_loss(
    model: VelocityModel,
    batches: Iterable[Batch],
    grid: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 0.9),
    seed: int = 0,
) -> float:
    """Deterministic flow-matching loss: every batch at every t of `grid`, no dropout, noise fixed
    by (seed, batch index) and shared across the grid. Batches are weighted by their real frames,
    so it is the mean over real frames and padding does not change it.
    """
    if not grid or not all(0.0 <= g <= 1.0 for g in grid):
        raise ValueError(f"grid must be a non-empty sequence of t in [0, 1], got {grid!r}")
    total, frames = 0.0, 0.0
    for index, batch in enumerate(batches):
        n_real = float(batch.latent_mask.sum())
        for t_value in grid:
            generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
            t = torch.full((batch.size,), float(t_value))
            loss = flow_matching_loss(model, batch, generator, text_dropout=0.0, speaker_dropout=0.0, t=t)
            total += float(loss) * n_real
            frames += n_real
    if frames == 0:
        raise ValueError("eval_loss got no real frames")
    return total / frames
