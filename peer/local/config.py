"""`LoopConfig`, the settings of the local training loop, in a module that imports no torch.

`gossip-tts peer --help` reads every default from the config dataclasses; while this class
lived in `peer/local/loop.py` (which imports the trainer and so torch), `--help` took seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class LoopConfig:
    max_steps: int | None = None
    """Stop once the trainer's step count reaches this; None trains until stopped."""
    checkpoint_dir: Path | None = None
    """Where `checkpoint.safetensors` lives; None disables checkpoints."""
    checkpoint_every_s: float = 300.0
    """Seconds between background checkpoints (a final one is always written on exit)."""
    resume: bool = False
    """Load `checkpoint_dir`'s checkpoint before training, if there is one."""
    log_every_s: float = 5.0
    """Seconds between progress lines (the first one comes after the first step)."""
    good_state_every_steps: int = 50
    """Steps between in-memory copies of the last good training state; a non-finite loss or
    state rolls back to it (0: never, and a poisoned run goes on poisoned)."""
    rollback_lr_factor: float = 0.5
    """Learning-rate multiplier applied at each rollback (trainers that declare `Capabilities.scale_lr`)."""

    def __post_init__(self) -> None:
        if self.max_steps is not None and self.max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {self.max_steps}")
        if self.checkpoint_every_s <= 0:
            raise ValueError(f"checkpoint_every_s must be > 0, got {self.checkpoint_every_s}")
        if self.good_state_every_steps < 0:
            raise ValueError(f"good_state_every_steps must be >= 0, got {self.good_state_every_steps}")
        if not 0 < self.rollback_lr_factor <= 1:
            raise ValueError(f"rollback_lr_factor must be in (0, 1], got {self.rollback_lr_factor}")
        if self.log_every_s < 0:
            raise ValueError(f"log_every_s must be >= 0, got {self.log_every_s}")
        if self.resume and self.checkpoint_dir is None:
            raise ValueError("resume needs a checkpoint directory")
        if self.checkpoint_dir is not None:
            self.checkpoint_dir = Path(self.checkpoint_dir)
