"""How the sampler guides (`GuidanceConfig`) and the names of its modes, in a module that imports
no torch: synthesize's config checks them and the CLI offers the modes while `--help` imports
nothing heavy. The modes themselves are described in `gossip_tts.model.sampler`."""

from __future__ import annotations

from dataclasses import dataclass

GUIDANCE_MODES = ("independent", "nested")


@dataclass(frozen=True)
class GuidanceConfig:
    """How the sampler steps and guides."""

    mode: str = "independent"
    """"independent" (Echo's single-drop branches) or "nested" (see `gossip_tts.model.sampler`)."""
    cfg_text: float = 3.0
    """Text guidance scale (independent: 0 is unguided; nested: 1 is unguided)."""
    cfg_speaker: float = 3.0
    """Speaker guidance scale (same convention as cfg_text)."""
    steps: int = 32
    """Euler steps."""
    t_min: float = 0.5
    """Guidance applies for t in [t_min, t_max]; other steps use the conditional velocity alone."""
    t_max: float = 1.0
    grid_scale: float = 0.999
    """The time grid is linspace(1, 0, steps + 1) · grid_scale."""
    truncation: float | None = None
    """Scale of the start noise (Echo offers 0.8 for flatter, safer output); None: 1."""

    def __post_init__(self) -> None:
        if self.mode not in GUIDANCE_MODES:
            raise ValueError(f"guidance mode must be one of {GUIDANCE_MODES}, got {self.mode!r}")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if not 0.0 <= self.t_min <= self.t_max <= 1.0:
            raise ValueError(f"need 0 <= t_min <= t_max <= 1, got {self.t_min}, {self.t_max}")
        if not 0.0 < self.grid_scale <= 1.0:
            raise ValueError(f"grid_scale must be in (0, 1], got {self.grid_scale}")
        if self.truncation is not None and not self.truncation > 0:
            raise ValueError(f"truncation must be > 0, got {self.truncation}")

    @classmethod
    def nested(cls, cfg_text: float, cfg_speaker: float, steps: int) -> GuidanceConfig:
        """`--guidance nested`: nested branches at every step, grid from exactly 1."""
        return cls(mode="nested", cfg_text=cfg_text, cfg_speaker=cfg_speaker, steps=steps, t_min=0.0,
                   grid_scale=1.0)
