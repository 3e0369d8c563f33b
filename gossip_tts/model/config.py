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
    arch: str = "base"
    """"base", or "echo": Echo TTS's exact layout, so its published weights load unchanged —
    one shared 3d timestep projection with, per block and per AdaLN, three low-rank
    down/up pairs (biased up) on silu(chunk) plus the chunk; per-head QK-norm weights;
    biases on the in/out projections; a causal speaker encoder whose biased in_proj is /6."""
    mlp_hidden_dim: int = 0
    """SwiGLU width of the trunk; 0 derives it from mlp_ratio (Echo states it: 5888)."""
    text_mlp_hidden_dim: int = 0
    """SwiGLU width of the text encoder; 0 derives it from mlp_ratio."""
    speaker_mlp_hidden_dim: int = 0
    """SwiGLU width of the speaker encoder; 0 derives it from mlp_ratio."""
    max_ref_frames: int = 0
    """Longest speaker reference accepted; 0 means max_frames. Echo reads up to 6400 frames
    through its causal speaker encoder while it generates at most 640."""

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
        for name in ("mlp_hidden_dim", "text_mlp_hidden_dim", "speaker_mlp_hidden_dim", "max_ref_frames"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"ModelConfig.{name} must be an int >= 0, got {value!r}")
        if self.arch not in ARCHS:
            raise ValueError(f"ModelConfig.arch must be one of {ARCHS}, got {self.arch!r}")
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
    def echo(self) -> bool:
        return self.arch == "echo"

    @property
    def ref_limit(self) -> int:
        return self.max_ref_frames or self.max_frames

    @property
    def mlp_hidden(self) -> int:
        return self.mlp_hidden_dim or mlp_hidden(self.d_model, self.mlp_ratio)

    @property
    def text_mlp_hidden(self) -> int:
        return self.text_mlp_hidden_dim or mlp_hidden(self.text_dim, self.mlp_ratio)

    @property
    def speaker_mlp_hidden(self) -> int:
        return self.speaker_mlp_hidden_dim or mlp_hidden(self.speaker_dim, self.mlp_ratio)


def mlp_hidden(width: int, ratio: float) -> int:
    """SwiGLU hidden width: `ratio * width` rounded up to a multiple of 8 (kernel-friendly)."""
    return -(-int(round(ratio * width)) // 8) * 8


ARCHS = ("base", "echo")

# Echo TTS base, as its inference code builds it (echo-tts 0.1.4): `import-echo` fills it.
_ECHO_2_4B: dict[str, int | float | str] = dict(
    d_model=2048, n_layers=24, n_heads=16, mlp_hidden_dim=5888, text_dim=1280, text_layers=14, text_heads=10,
    text_mlp_hidden_dim=3328, speaker_dim=1280, speaker_layers=14, speaker_heads=10, speaker_mlp_hidden_dim=3328,
    speaker_patch=4, adaln_rank=256, t_freq_dim=512, norm_eps=1e-5, arch="echo", text_frontend="echo",
    max_text_bytes=768, max_frames=640, max_ref_frames=6400,
)

# DiT width/layers/heads per preset (the README lists their parameter counts); encoders are kept a fraction of the trunk.
PRESETS: dict[str, dict[str, int | float | str]] = {
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
    "echo-2.4b": _ECHO_2_4B,
    # Echo's shape at test size: the import and equivalence tests build Echo's own model like this.
    "echo-tiny": {
        **_ECHO_2_4B, "d_model": 64, "n_layers": 2, "n_heads": 4, "mlp_hidden_dim": 176, "text_dim": 32,
        "text_layers": 1, "text_heads": 2, "text_mlp_hidden_dim": 96, "speaker_dim": 32, "speaker_layers": 1,
        "speaker_heads": 2, "speaker_mlp_hidden_dim": 96, "adaln_rank": 8, "t_freq_dim": 64,
    },
}


def model_config(preset: str, latent_dim: int = 128, **overrides: int | float | str) -> ModelConfig:
    """The config of a named preset for a codec with `latent_dim` channels."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; choose one of {', '.join(PRESETS)}")
    return ModelConfig(**{**PRESETS[preset], "latent_dim": latent_dim, **overrides})  # type: ignore[arg-type]


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (works on the meta device, so big presets can be sized for free)."""
    return sum(p.numel() for p in model.parameters())
