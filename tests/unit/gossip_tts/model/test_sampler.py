"""Guided Euler sampler: shapes, determinism, Echo's independent guidance and the nested form checked by hand."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.model import EchoDiT, GuidanceConfig, model_config, sample
from tests.unit.model_helpers import random_tiny_model

D = 32





def conditions() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    text_mask = torch.ones(2, 9, dtype=torch.bool)
    text_mask[1, 5:] = False
    ref_mask = torch.ones(2, 10, dtype=torch.bool)
    ref_mask[0, 7:] = False
    return dict(
        text_ids=torch.randint(1, 256, (2, 9), generator=g), text_mask=text_mask,
        ref=torch.randn(2, 10, D, generator=g), ref_mask=ref_mask,
    )


def test_returns_finite_latents_of_the_asked_length() -> None:
    model, c = random_tiny_model(D), conditions()
    g = GuidanceConfig(steps=4)
    out = sample(model, **c, n_frames=23, guidance=g, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, 23, D) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    again = sample(model, **c, n_frames=23, guidance=g, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    other = sample(model, **c, n_frames=23, guidance=g, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(out, other)


def test_one_nested_step_equals_a_hand_computed_guided_euler_step() -> None:
    model, c = random_tiny_model(D), conditions()
    s_text, s_spk = 2.5, 1.5
    out = sample(model, **c, n_frames=11, guidance=GuidanceConfig.nested(s_text, s_spk, steps=1),
                 generator=torch.Generator().manual_seed(4))
    x1 = torch.randn(2, 11, D, generator=torch.Generator().manual_seed(4))
    t1 = torch.ones(2)
    none_t, none_r = torch.zeros_like(c["text_mask"]), torch.zeros_like(c["ref_mask"])
    with torch.no_grad():
        v_none = model(x1, t1, c["text_ids"], none_t, c["ref"], none_r)
        v_text = model(x1, t1, c["text_ids"], c["text_mask"], c["ref"], none_r)
        v_both = model(x1, t1, c["text_ids"], c["text_mask"], c["ref"], c["ref_mask"])
    v = v_none + s_text * (v_text - v_none) + s_spk * (v_both - v_text)
    assert (v_both - v_none).abs().max() > 1e-3  # guidance has something to act on
    torch.testing.assert_close(out, x1 - 1.0 * v, atol=1e-5, rtol=1e-5)


def test_unit_nested_guidance_is_plain_conditional_euler() -> None:
    model, c = random_tiny_model(D), conditions()
    out = sample(model, **c, n_frames=7, guidance=GuidanceConfig.nested(1.0, 1.0, steps=2),
                 generator=torch.Generator().manual_seed(2))
    x = torch.randn(2, 7, D, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for t in (1.0, 0.5):
            x = x - 0.5 * model(x, torch.full((2,), t), **c)
    torch.testing.assert_close(out, x, atol=1e-5, rtol=1e-5)


def test_untrained_model_returns_the_noise() -> None:
    """Zero-initialised output projection: velocity 0, so sampling leaves the start noise."""
    out = sample(EchoDiT(model_config("tiny", D)), **conditions(), n_frames=5, guidance=GuidanceConfig(steps=3),
                 generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(out, torch.randn(2, 5, D, generator=torch.Generator().manual_seed(9)))


def test_refuses_empty_requests() -> None:
    with pytest.raises(ValueError):
        sample(random_tiny_model(D), **conditions(), n_frames=0)
    with pytest.raises(ValueError):
        GuidanceConfig(steps=0)
    with pytest.raises(ValueError):
        GuidanceConfig(mode="both")
    with pytest.raises(ValueError):
        GuidanceConfig(t_min=0.6, t_max=0.5)


def test_synthesis_longer_than_training_clips_is_refused_clearly() -> None:
    from gossip_tts.apps.synth_app import check_length

    check_length(100, 100, 50.0)
    with pytest.raises(ValueError, match=r"101 frames \(2.0 s\).*at most 100 frames"):
        check_length(101, 100, 50.0)
    model = EchoDiT(model_config("tiny", D, max_frames=16))
    with pytest.raises(ValueError, match="accepts 16"):
        sample(model, **conditions(), n_frames=17, guidance=GuidanceConfig(steps=1))


def branches(model: EchoDiT, x: torch.Tensor, t: float, c: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    none_t, none_r = torch.zeros_like(c["text_mask"]), torch.zeros_like(c["ref_mask"])
    tt = torch.full((x.shape[0],), t)
    with torch.no_grad():
        return {
            "both": model(x, tt, c["text_ids"], c["text_mask"], c["ref"], c["ref_mask"]),
            "no_text": model(x, tt, c["text_ids"], none_t, c["ref"], c["ref_mask"]),
            "no_speaker": model(x, tt, c["text_ids"], c["text_mask"], c["ref"], none_r),
        }


def test_independent_guidance_by_hand_inside_and_outside_its_window() -> None:
    """Echo's sampler: v + s_t(v − v_no_text) + s_s(v − v_no_speaker) for t in [0.5, 1] on a
    0.999-scaled grid, plain v below 0.5, start noise scaled by the truncation."""
    model, c = random_tiny_model(D), conditions()
    g = GuidanceConfig(cfg_text=2.0, cfg_speaker=5.0, steps=4, truncation=0.8)
    out = sample(model, **c, n_frames=9, guidance=g, generator=torch.Generator().manual_seed(3))
    x = 0.8 * torch.randn(2, 9, D, generator=torch.Generator().manual_seed(3))
    times = [1.0 * 0.999, 0.75 * 0.999, 0.5 * 0.999, 0.25 * 0.999, 0.0]
    for t, t_next in zip(times[:-1], times[1:]):
        v = branches(model, x, t, c)
        guided = v["both"] + 2.0 * (v["both"] - v["no_text"]) + 5.0 * (v["both"] - v["no_speaker"])
        x = x + (t_next - t) * (guided if t >= 0.5 else v["both"])
    torch.testing.assert_close(out, x, atol=1e-5, rtol=1e-5)


def test_equal_scales_keep_text_guidance_only_in_the_independent_form() -> None:
    """Nested guidance with s_t = s_s cancels its text-only branch; independent keeps both."""
    model, c = random_tiny_model(D), conditions()
    x = torch.randn(2, 6, D, generator=torch.Generator().manual_seed(5))
    v = branches(model, x, 0.9, c)
    from gossip_tts.model.sampler import guidance_conditions, guided_velocity

    def guided(mode: str, s_text: float) -> torch.Tensor:
        g = GuidanceConfig(mode=mode, cfg_text=s_text, cfg_speaker=3.0)
        cond = guidance_conditions(model, c["text_ids"], c["text_mask"], c["ref"], c["ref_mask"], mode)
        with torch.no_grad():
            return guided_velocity(model, x, 0.9, cond, g)

    none_t, none_r = torch.zeros_like(c["text_mask"]), torch.zeros_like(c["ref_mask"])
    with torch.no_grad():
        v_none = model(x, torch.full((2,), 0.9), c["text_ids"], none_t, c["ref"], none_r)
    torch.testing.assert_close(guided("nested", 3.0), v_none + 3.0 * (v["both"] - v_none), atol=1e-5, rtol=1e-4)
    moved = guided("independent", 3.0) - guided("independent", 0.0)
    torch.testing.assert_close(moved, 3.0 * (v["both"] - v["no_text"]), atol=1e-5, rtol=1e-4)
    assert moved.abs().max() > 1e-3
