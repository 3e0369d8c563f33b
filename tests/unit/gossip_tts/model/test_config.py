"""ModelConfig validation, presets and their parameter counts."""

from __future__ import annotations

import pytest
import torch

from gossip_tts.model import PRESETS, EchoDiT, ModelConfig, count_parameters, model_config



def meta_count(preset: str, latent_dim: int = 128) -> int:
    with torch.device("meta"):
        return count_parameters(EchoDiT(model_config(preset, latent_dim)))


@pytest.mark.parametrize(
    ("preset", "low", "high"),
    [("tiny", 0.2e6, 0.5e6), ("small", 4e6, 7e6), ("100m", 80e6, 130e6), ("800m", 650e6, 950e6)],
)
def test_preset_parameter_counts_are_in_their_ballpark(preset: str, low: float, high: float) -> None:
    assert low <= meta_count(preset) <= high


def test_meta_count_equals_real_count() -> None:
    real = count_parameters(EchoDiT(model_config("tiny", 128)))
    assert real == meta_count("tiny")


def test_latent_dim_reaches_input_and_output() -> None:
    with torch.device("meta"):
        model = EchoDiT(model_config("tiny", 1024))
    assert model.in_proj.weight.shape == (64, 1024)
    assert model.out_proj.weight.shape == (1024, 64)
    assert model.speaker_encoder.in_proj.weight.shape == (64, 4 * 1024)
    assert meta_count("tiny", 1024) > meta_count("tiny", 128)


def test_model_has_no_biases() -> None:
    model = EchoDiT(model_config("tiny", 128))
    assert not [name for name, _ in model.named_parameters() if name.endswith("bias")]


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown model preset 'huge'.*tiny, small, 100m, 800m, echo-2.4b, echo-tiny"):
        model_config("huge", 128)
    assert set(PRESETS) == {"tiny", "small", "100m", "800m", "echo-2.4b", "echo-tiny"}


def test_echo_preset_is_echo_sized_and_biased_where_echo_is() -> None:
    cfg = model_config("echo-2.4b", 80)
    assert (cfg.mlp_hidden, cfg.text_mlp_hidden, cfg.speaker_mlp_hidden) == (5888, 3328, 3328)
    assert (cfg.ref_limit, cfg.max_frames, cfg.max_text_bytes, cfg.norm_eps) == (6400, 640, 768, 1e-5)
    assert 2.37e9 < meta_count("echo-2.4b", 80) < 2.40e9  # Echo's 2.4B less its blockwise modules
    model = EchoDiT(model_config("echo-tiny", 80))
    biases = {n.split(".", 2)[-1] if n.startswith("blocks.") else n for n, _ in model.named_parameters() if n.endswith("bias")}
    assert biases == {"in_proj.bias", "out_proj.bias", "speaker_encoder.in_proj.bias"} | {
        f"{a}_adaln.{m}_up.bias" for a in ("attn", "mlp") for m in ("shift", "scale", "gate")
    }
    assert model.blocks[0].attn.q_norm.weight.shape == (4, 16) and model.shared_adaln.weight.shape == (3 * 64, 64)
    with pytest.raises(ValueError, match="arch"):
        model_config("tiny", 128, arch="other")


def test_overrides_apply() -> None:
    assert model_config("tiny", 128, n_layers=3).n_layers == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(d_model=65),  # not divisible by n_heads
        dict(d_model=12, n_heads=4),  # odd head width: no RoPE pairs
        dict(n_heads=1, d_model=64),  # RoPE needs a half of the heads to rotate
        dict(n_layers=0),
        dict(latent_dim=-1),
        dict(speaker_patch=True),
        dict(mlp_ratio=0.0),
        dict(t_freq_dim=7),
        dict(norm_eps=0.0),
        dict(text_dim=30, text_heads=4),
    ],
)
def test_invalid_configs_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ModelConfig(**kwargs)


def test_default_config_is_valid() -> None:
    cfg = ModelConfig()
    assert cfg.head_dim == cfg.d_model // cfg.n_heads and cfg.mlp_hidden % 8 == 0
