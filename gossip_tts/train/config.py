"""Configuration of one TTS training replica (model, optimiser, batches)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gossip_tts.device import DEVICE_CHOICES

PRESET_CHOICES = ("tiny", "small", "100m", "800m", "echo-tiny", "echo-2.4b")


@dataclass
class TrainConfig:
    preset: str = "small"
    """Model size: tiny (tests), small (CPU demos), 100m, 800m; echo-2.4b (Echo TTS's own layout,
    to fine-tune imported weights) and echo-tiny (its shape at test size)."""
    device: str = "auto"
    """auto | cpu | cuda | mps (auto: CUDA, then MPS, then CPU)."""
    sources: list[str] = field(default_factory=list)
    """Latent tar sources: folders of .tar files or http(s) URLs."""
    seed: int = 0
    """Seeds the model init, the noise, dropout and this replica's shard order."""
    batch_size: int = 16
    """Most clips per batch; a batch also holds at most batch_size × max_frames padded frames."""
    bucket_size: int = 128
    """Samples gathered and sorted by duration before batching (less padding)."""
    max_frames: int = 1024
    """Longest clip trained on, in latent frames (~12 s of the mel codec); longer clips are
    skipped and counted, never cropped, and the model refuses positions past it."""
    max_ref_frames: int = 128
    max_text_bytes: int = 256
    lr: float = 3e-4
    warmup_steps: int = 100
    total_steps: int = 20_000
    """Cosine horizon; training may go on past it at the floor learning rate."""
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    """Global gradient-norm clip (0 disables)."""
    text_dropout: float = 0.1
    speaker_dropout: float = 0.1
    bf16: bool = True
    """Use bf16 autocast on CUDA (ignored elsewhere)."""
    offload: bool = False
    """ZeRO-Offload: fp32 master weights and AdamW state in CPU memory, bf16 weights on the GPU."""
    compile: bool = False
    """Wrap the model in torch.compile (falls back to eager, saying why, where the backend is missing)."""
    peak_tflops: float | None = None
    """The device's dense bf16 peak TFLOP/s for MFU (default: a table by GPU name; none on CPU)."""
    init_from: str | None = None
    """Start from this checkpoint's model weights (fresh optimiser, step 0): fine-tuning."""
    threads: int | None = None
    """torch CPU threads (None: torch's default). One thread is fastest on a busy shared CPU."""

    def __post_init__(self) -> None:
        if self.preset not in PRESET_CHOICES:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESET_CHOICES)}")
        if self.device not in DEVICE_CHOICES:
            raise ValueError(f"unknown device {self.device!r}; choose one of {', '.join(DEVICE_CHOICES)}")
        for name in ("batch_size", "bucket_size", "max_frames", "max_ref_frames", "max_text_bytes", "total_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_ref_frames < 4:
            raise ValueError("max_ref_frames must be >= 4 (the speaker encoder reads 4-frame patches)")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0 or self.grad_clip < 0 or self.weight_decay < 0:
            raise ValueError("warmup_steps, grad_clip and weight_decay must be >= 0")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        for name in ("text_dropout", "speaker_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.peak_tflops is not None and self.peak_tflops <= 0:
            raise ValueError(f"peak_tflops must be > 0, got {self.peak_tflops}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        self.betas = tuple(self.betas)  # type: ignore[assignment]
        self.sources = list(self.sources)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
