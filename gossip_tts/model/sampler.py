"""Euler sampler from t=1 (noise) to t=0 (latent) with separate text and speaker guidance.

Guidance (nested conditions, one forward over a 3B batch per step):

    v = v(∅,∅) + s_text·(v(text,∅) − v(∅,∅)) + s_spk·(v(text,spk) − v(text,∅))

The text term pushes away from the unconditional velocity towards the text; the speaker term
pushes from text-only towards text+speaker. With s_text = s_spk = 1 it reduces to plain
v(text,spk). "∅" is an all-False mask, exactly the input that training's condition dropout shows
the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gossip_tts.model.dit import Conditions, EchoDiT


def guided_velocity(
    model: EchoDiT, x: Tensor, t: float, cond: Conditions, cfg_text: float, cfg_speaker: float
) -> Tensor:
    """Guided velocity (B, T, D) of x (B, T, D) at time t; `cond` holds the 3B conditions in the
    order (∅,∅), (text,∅), (text,spk)."""
    b = x.shape[0]
    x3 = x.repeat(3, 1, 1)  # (3B, T, D)
    t3 = torch.full((3 * b,), float(t), device=x.device, dtype=x.dtype)
    v_none, v_text, v_both = model.denoise(x3, t3, cond).float().chunk(3)  # (B, T, D) each
    return v_none + cfg_text * (v_text - v_none) + cfg_speaker * (v_both - v_text)


def guidance_conditions(
    model: EchoDiT, text_ids: Tensor, text_mask: Tensor, ref: Tensor, ref_mask: Tensor
) -> Conditions:
    """Encode the three condition sets (∅,∅), (text,∅), (text,spk) as one 3B batch."""
    no_text, no_ref = torch.zeros_like(text_mask), torch.zeros_like(ref_mask)
    return model.encode_conditions(
        text_ids.repeat(3, 1),
        torch.cat([no_text, text_mask, text_mask]),
        ref.repeat(3, 1, 1),
        torch.cat([no_ref, no_ref, ref_mask]),
    )


@torch.no_grad()
def sample(
    model: EchoDiT,
    text_ids: Tensor,
    text_mask: Tensor,
    ref: Tensor,
    ref_mask: Tensor,
    n_frames: int,
    steps: int = 32,
    cfg_text: float = 3.0,
    cfg_speaker: float = 3.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Latents (B, n_frames, D) for text (B, L) and speaker reference (B, R, D).

    The starting noise is drawn on CPU from `generator` (so a seed gives the same audio on any
    device), then Euler steps x ← x + (t_next − t)·v on a uniform grid from 1 to 0. The text and
    speaker K/V are computed once and reused by every step.
    """
    if n_frames < 1 or steps < 1:
        raise ValueError(f"n_frames and steps must be >= 1, got {n_frames}, {steps}")
    b, device = text_ids.shape[0], text_ids.device
    x = torch.randn(b, n_frames, model.cfg.latent_dim, generator=generator).to(device)  # (B, T, D) at t=1
    cond = guidance_conditions(model, text_ids, text_mask, ref, ref_mask)
    times = torch.linspace(1.0, 0.0, steps + 1).tolist()
    for t, t_next in zip(times[:-1], times[1:]):
        x = x + (t_next - t) * guided_velocity(model, x, t, cond, cfg_text, cfg_speaker)
    return x
