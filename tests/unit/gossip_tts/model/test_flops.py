"""forward_flops: hand-computed values, linearity in depth, agreement with torch's FLOP counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gossip_tts.model import EchoDiT, ModelConfig, forward_flops, model_config, train_flops_per_sample



def micro_config(n_layers: int = 1) -> ModelConfig:
    return ModelConfig(
        latent_dim=3, d_model=8, n_layers=n_layers, n_heads=2, text_dim=4, text_layers=1, text_heads=2,
        speaker_dim=4, speaker_layers=1, speaker_heads=2, speaker_patch=2, adaln_rank=2, mlp_ratio=1.0,
        t_freq_dim=4,
    )


def test_hand_computed_micro_config() -> None:
    cfg = micro_config()
    assert (cfg.mlp_hidden, cfg.text_mlp_hidden, cfg.speaker_mlp_hidden) == (8, 8, 8)
    frames, text_len, ref_len = 5, 3, 3  # 2 speaker patches of 2 frames
    text = 5 * 2 * 3 * 4 * 4 + 2 * 2 * 3 * 3 * 4 + 3 * 2 * 3 * 4 * 8  # 480 + 144 + 576
    # patch projection + one layer over 2 patches: 96 + 320 + 64 + 384
    speaker = 2 * 2 * (2 * 3) * 4 + (5 * 2 * 2 * 4 * 4 + 2 * 2 * 2 * 2 * 4 + 3 * 2 * 2 * 4 * 8)
    timestep = 2 * 4 * 8 + 2 * 8 * 8 + 2 * 8 * 48  # 64 + 128 + 768
    io = 2 * 5 * 3 * 8 * 2  # 480
    block = (
        2 * 8 * 2 + 2 * 2 * 48  # low-rank AdaLN: 32 + 192
        + 2 * 2 * 3 * 4 * 8 + 2 * 2 * 2 * 4 * 8  # text and speaker K/V: 384 + 256
        + 5 * 2 * 5 * 8 * 8  # q k v gate out: 3200
        + 2 * 2 * 5 * (5 + 3 + 2) * 8  # scores and values over 10 keys: 1600
        + 3 * 2 * 5 * 8 * 8  # SwiGLU: 1920
    )
    expected = text + speaker + timestep + io + block
    assert expected == 11088
    assert forward_flops(cfg, frames, text_len, ref_len) == expected
    assert train_flops_per_sample(cfg, frames, text_len, ref_len) == 3 * expected


def test_linear_in_depth() -> None:
    f = [forward_flops(micro_config(n), 50, 20, 30) for n in (1, 2, 3, 6)]
    per_layer = f[1] - f[0]
    assert per_layer > 0
    assert f[2] - f[1] == per_layer
    assert f[3] - f[0] == 5 * per_layer


@pytest.mark.parametrize("preset", ["tiny", "echo-tiny"])
def test_matches_torch_flop_counter_on_the_real_model(preset: str) -> None:
    """torch counts the linear layers; attention (SDPA has no CPU flop formula) is added by hand."""
    cfg = model_config(preset, 128)
    model = EchoDiT(cfg)
    frames, text_len, ref_len = 30, 17, 13
    n_patches = 4
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(
            torch.randn(1, frames, 128), torch.rand(1), torch.randint(0, 256, (1, text_len)),
            torch.ones(1, text_len, dtype=torch.bool), torch.randn(1, ref_len, 128),
            torch.ones(1, ref_len, dtype=torch.bool),
        )
    attention = (
        cfg.text_layers * 4 * text_len * text_len * cfg.text_dim
        + cfg.speaker_layers * 4 * n_patches * n_patches * cfg.speaker_dim
        + cfg.n_layers * 4 * frames * (frames + text_len + n_patches) * cfg.d_model
    )
    assert forward_flops(cfg, frames, text_len, ref_len) == counter.get_total_flops() + attention


def test_grows_quadratically_in_frames_through_attention() -> None:
    cfg = model_config("small", 128)
    a, b, c = (forward_flops(cfg, n, 64, 64) for n in (100, 200, 300))
    assert (c - b) > (b - a)  # second difference > 0: the T² attention term
