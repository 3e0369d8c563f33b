"""`SynthConfig`, the settings of `gossip-tts synthesize`, in a module that imports no torch, so
that `synthesize --help` reads its defaults from here (`gossip_tts.cli.options`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from gossip_tts.model.guidance import GuidanceConfig
from gossip_tts.train.weights import check_weights


@dataclass
class SynthConfig:
    checkpoint: Path
    text: str
    out: Path
    reference: Path | None = None
    """A wav of the voice to speak in; without one the speaker condition is dropped."""
    seconds: float | None = None
    """Length of the output; default: estimated from the text at the training data's pace."""
    steps: int = GuidanceConfig.steps
    """The sampler's settings default to the sampler's own (`GuidanceConfig`), named there once."""
    cfg_text: float = GuidanceConfig.cfg_text
    cfg_speaker: float = GuidanceConfig.cfg_speaker
    guidance: str = GuidanceConfig.mode
    """"independent" (Echo's single-drop branches, guided for t in [0.5, 1]) or "nested" (all steps)."""
    truncation: float | None = GuidanceConfig.truncation
    """Scale of the start noise (Echo's 0.8 gives flatter, safer output); None: 1."""
    seed: int = 0
    device: str = "cpu"
    codec_weights: str | None = None
    weights: str = "average"
    """"average" (the peer's averaged weights, where the checkpoint has them) or "live" (gossip_tts.train.weights)."""

    def __post_init__(self) -> None:
        self.checkpoint, self.out = Path(self.checkpoint), Path(self.out)
        if not self.text.strip():
            raise ValueError("--text is empty")
        if self.reference is not None:
            self.reference = Path(self.reference)
            if not self.reference.exists():
                raise ValueError(f"reference wav {self.reference} does not exist")
        if self.seconds is not None and not 0 < self.seconds <= 60:
            raise ValueError(f"--seconds must be in (0, 60], got {self.seconds}")
        if self.steps <= 0:
            raise ValueError(f"--steps must be > 0, got {self.steps}")
        check_weights(self.weights)
        self.sampler  # validates the guidance settings

    @property
    def sampler(self) -> GuidanceConfig:
        if self.guidance == "nested":
            return replace(GuidanceConfig.nested(self.cfg_text, self.cfg_speaker, self.steps), truncation=self.truncation)
        return GuidanceConfig(mode=self.guidance, cfg_text=self.cfg_text, cfg_speaker=self.cfg_speaker, steps=self.steps,
                              truncation=self.truncation)
