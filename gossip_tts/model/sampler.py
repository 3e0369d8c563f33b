"""Euler sampler from t≈1 (noise) to t=0 (latent) with separate text and speaker guidance.

Two ways to combine the branches (one forward over a 3B batch per guided step):

- "independent" (Echo TTS's, the default): each condition is dropped on its own,

      v = v(T,S) + s_text·(v(T,S) − v(∅,S)) + s_spk·(v(T,S) − v(T,∅)),

  so each scale moves exactly one condition, and the rarely trained v(∅,∅) is never used.
- "nested": v = v(∅,∅) + s_text·(v(T,∅) − v(∅,∅)) + s_spk·(v(T,S) − v(T,∅)). With equal
  scales the v(T,∅) terms cancel, so it cannot weigh text and speaker apart; kept as an option.

As in Echo, guidance is applied only for t in [t_min, t_max] (default [0.5, 1]: it shapes
content early and would only add artefacts late; unguided steps cost one B-batch forward),
the time grid is linspace(1, 0)·grid_scale (0.999: the first step is not at pure noise,
where the velocity is ill-defined), and the start noise may be truncated (scaled down).
"∅" is an all-False mask, exactly what training's condition dropout shows the model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gossip_tts.model.dit import Conditions, EchoDiT
from gossip_tts.model.guidance import GuidanceConfig


def guidance_conditions(
    model: EchoDiT, text_ids: Tensor, text_mask: Tensor, ref: Tensor, ref_mask: Tensor, mode: str
) -> Conditions:
    """The 3B conditions, the fully conditional set first: independent (T,S), (∅,S), (T,∅);
    nested (T,S), (∅,∅), (T,∅)."""
    no_text, no_ref = torch.zeros_like(text_mask), torch.zeros_like(ref_mask)
    second_ref = ref_mask if mode == "independent" else no_ref
    return model.encode_conditions(
        text_ids.repeat(3, 1),
        torch.cat([text_mask, no_text, text_mask]),
        ref.repeat(3, 1, 1),
        torch.cat([ref_mask, second_ref, no_ref]),
    )


def first_rows(cond: Conditions, b: int) -> Conditions:
    """The first b rows of every condition tensor (the fully conditional set)."""
    return Conditions(kv=[(k[:b], v[:b]) for k, v in cond.kv], mask=cond.mask[:b])


def guided_velocity(model: EchoDiT, x: Tensor, t: float, cond: Conditions, g: GuidanceConfig) -> Tensor:
    """Guided velocity (B, T, D) of x (B, T, D) at time t; `cond` from guidance_conditions."""
    b = x.shape[0]
    x3 = x.repeat(3, 1, 1)  # (3B, T, D)
    t3 = torch.full((3 * b,), float(t), device=x.device, dtype=x.dtype)
    v_all, v_a, v_b = model.denoise(x3, t3, cond).float().chunk(3)  # (B, T, D) each
    if g.mode == "independent":  # v_a = v(∅,S), v_b = v(T,∅)
        return v_all + g.cfg_text * (v_all - v_a) + g.cfg_speaker * (v_all - v_b)
    return v_a + g.cfg_text * (v_b - v_a) + g.cfg_speaker * (v_all - v_b)  # v_a = v(∅,∅), v_b = v(T,∅)


@torch.no_grad()
def sample(
    model: EchoDiT,
    text_ids: Tensor,
    text_mask: Tensor,
    ref: Tensor,
    ref_mask: Tensor,
    n_frames: int,
    guidance: GuidanceConfig | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Latents (B, n_frames, D) for text (B, L) and speaker reference (B, R, D).

    The start noise is drawn on CPU from `generator` (so a seed gives the same audio on any
    device); then Euler steps x ← x + (t_next − t)·v. The text and speaker K/V are computed once
    and reused by every step.
    """
    g = guidance or GuidanceConfig()
    if n_frames < 1:
        raise ValueError(f"n_frames must be >= 1, got {n_frames}")
    b, device = text_ids.shape[0], text_ids.device
    x = torch.randn(b, n_frames, model.cfg.latent_dim, generator=generator).to(device)  # (B, T, D) at t≈1
    if g.truncation is not None:
        x = x * g.truncation
    cond = guidance_conditions(model, text_ids, text_mask, ref, ref_mask, g.mode)
    plain = first_rows(cond, b)
    times = (torch.linspace(1.0, 0.0, g.steps + 1, dtype=torch.float64) * g.grid_scale).tolist()
    for t, t_next in zip(times[:-1], times[1:]):
        if g.t_min <= t <= g.t_max:
            v = guided_velocity(model, x, t, cond, g)
        else:
            v = model.denoise(x, torch.full((b,), float(t), device=device, dtype=x.dtype), plain).float()
        x = x + (t_next - t) * v
    return x
