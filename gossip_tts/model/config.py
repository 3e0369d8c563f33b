"""The one validated config of the Echo-style DiT, its size presets, and a parameter counter."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

from gossip_tts.data.text import TEXT_FRONTENDS


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of the DiT trunk and its text and speaker encoders.

    Frozen so that a config can key caches and travel with checkpoints unchanged; build a
    variant with `dataclasses.replace`.
    """

    latent_dim: int = 128
    """Channels of one latent frame: 128 for the mel codec, 1024 for DAC."""
    d_model: int = 256
    """Width of the DiT trunk."""
    n_layers: int = 4
    """DiT blocks."""
    n_heads: int = 4
    """Attention heads of the trunk; RoPE rotates the first half of them."""
    text_dim: int = 128
    """Width of the byte-level text encoder."""
    text_layers: int = 2
    """Bidirectional transformer layers of the text encoder."""
    text_heads: int = 2
    """Attention heads of the text encoder."""
    speaker_dim: int = 128
    """Width of the speaker (reference latent) encoder."""
    speaker_layers: int = 2
    """Transformer layers of the speaker encoder."""
    speaker_heads: int = 2
    """Attention heads of the speaker encoder."""
    speaker_patch: int = 4
    """Reference frames folded into one speaker token (shortens the speaker sequence)."""
    adaln_rank: int = 32
    """Rank of each block's private correction to the shared AdaLN modulation."""
    mlp_ratio: float = 3.0
    """SwiGLU hidden width as a multiple of the layer width (rounded up to a multiple of 8)."""
    t_freq_dim: int = 256
    """Width of the sinusoidal timestep features fed to the timestep MLP."""
    max_text_bytes: int = 512
    """Longest text, in byte ids, the model accepts; the trainer sets it to the training cap."""
    max_frames: int = 4096
    """Longest latent clip (and speaker reference) the model accepts; RoPE positions past
    what training saw extrapolate poorly, so longer inputs are refused, not silently used.
    The trainer sets it to the longest clip it trains on (`TrainConfig.max_frames`)."""
    text_frontend: str = "bytes"
    """How text becomes byte ids: "bytes" (UTF-8) or "echo" (Echo TTS's, for imported weights)."""
    rope_theta: float = 10000.0
    """RoPE base period."""
    norm_eps: float = 1e-6
    """Epsilon of every RMSNorm."""

    def __post_init__(self) -> None:
        positive = (
            "latent_dim d_model n_layers n_heads text_dim text_layers text_heads speaker_dim "
            "speaker_layers speaker_heads speaker_patch adaln_rank t_freq_dim max_text_bytes "
            "max_frames"
        ).split()
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        for width, heads, label in (
            (self.d_model, self.n_heads, "d_model/n_heads"),
            (self.text_dim, self.text_heads, "text_dim/text_heads"),
            (self.speaker_dim, self.speaker_heads, "speaker_dim/speaker_heads"),
        ):
            if width % heads:
                raise ValueError(f"ModelConfig {label}: {width} is not divisible by {heads}")
            if (width // heads) % 2:
                raise ValueError(f"ModelConfig {label}: head width {width // heads} must be even for RoPE")
        if self.n_heads < 2:
            raise ValueError("ModelConfig.n_heads must be >= 2: RoPE rotates half the heads")
        if self.text_frontend not in TEXT_FRONTENDS:
            raise ValueError(f"ModelConfig.text_frontend must be one of {TEXT_FRONTENDS}, got {self.text_frontend!r}")
        if self.t_freq_dim % 2:
            raise ValueError(f"ModelConfig.t_freq_dim must be even, got {self.t_freq_dim}")
        if not self.mlp_ratio > 0:
            raise ValueError(f"ModelConfig.mlp_ratio must be > 0, got {self.mlp_ratio}")
        if not self.rope_theta > 0:
            raise ValueError(f"ModelConfig.rope_theta must be > 0, got {self.rope_theta}")
        if not self.norm_eps > 0:
            raise ValueError(f"ModelConfig.norm_eps must be > 0, got {self.norm_eps}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def mlp_hidden(self) -> int:
        return mlp_hidden(self.d_model, self.mlp_ratio)

    @property
    def text_mlp_hidden(self) -> int:
        return mlp_hidden(self.text_dim, self.mlp_ratio)

    @property
    def speaker_mlp_hidden(self) -> int:
        return mlp_hidden(self.speaker_dim, self.mlp_ratio)


def mlp_hidden(width: int, ratio: float) -> int:
    """SwiGLU hidden width: `ratio * width` rounded up to a multiple of 8 (kernel-friendly)."""
    return -(-int(round(ratio * width)) // 8) * 8


# DiT width/layers/heads follow DESIGN.md §6; encoders are kept a fraction of the trunk.
PRESETS: dict[str, dict[str, int | float]] = {
    "tiny": dict(
        d_model=64, n_layers=2, n_heads=4, text_dim=64, text_layers=1, text_heads=2,
        speaker_dim=64, speaker_layers=1, speaker_heads=2, adaln_rank=16, t_freq_dim=64,
    ),
    "small": dict(
        d_model=256, n_layers=4, n_heads=4, text_dim=128, text_layers=2, text_heads=2,
        speaker_dim=128, speaker_layers=2, speaker_heads=2, adaln_rank=32,
    ),
    "100m": dict(
        d_model=640, n_layers=12, n_heads=10, text_dim=384, text_layers=4, text_heads=6,
        speaker_dim=384, speaker_layers=4, speaker_heads=6, adaln_rank=128,
    ),
    "800m": dict(
        d_model=1280, n_layers=24, n_heads=10, text_dim=768, text_layers=6, text_heads=12,
        speaker_dim=768, speaker_layers=6, speaker_heads=12, adaln_rank=256,
    ),
}


def model_config(preset: str, latent_dim: int = 128, **overrides: int | float) -> ModelConfig:
    """The config of a named preset for a codec with `latent_dim` channels."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return ModelConfig(**{**PRESETS[preset], "latent_dim": latent_dim, **overrides})  # type: ignore[arg-type]


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (works on the meta device, so big presets can be sized for free)."""
    return sum(p.numel() for p in model.parameters())
