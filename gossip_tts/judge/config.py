"""`JudgeConfig`, the settings of `gossip-tts judge`, in a module that imports no torch, so that
`judge --help` reads its defaults from here (`gossip_tts.cli.options`) and answers at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gossip_tts.audio.registry import check_codec_name
from gossip_tts.cache_root import cache_root

PLOT_NAME = "judge.png"
HEARD_BEFORE_NAME = "judge-heard.json"
"""The file of the ears' answers on clips heard before, in `cache_root()` (the voice example's too)."""


@dataclass
class JudgeConfig:
    """What to judge, against what."""

    folder: Path
    """LJSpeech-style folder (`wavs/`, `metadata.csv` with `id|text`) of the clips to judge."""
    references: list[Path] = field(default_factory=list)
    """Clips of the target voice; speaker similarity is the cosine to their mean embedding (none: no similarity)."""
    real: Path | None = None
    """LJSpeech-style folder of the real recordings of the same ids: the ceiling and codec controls."""
    codec: str = "mel"
    """Codec of the round-trip control (one of `gossip_tts.audio.registry.AUDIO_CODECS`)."""
    codec_weights: str | None = None
    """That codec's local weights, where it has any."""
    seed: int = 0
    """Seed of the noise floor."""
    plot: Path | None = None
    """Where the plot goes; None puts it at FOLDER/judge.png."""
    plot_enabled: bool = True
    """False: no plot (`--no-plot`)."""
    remember: bool = True
    """Keep the ears' answers on the control clips in `heard_before_path` and recall them: the
    controls are the same clips every time the same ids are judged, and hearing them is most of
    a run's minutes (`gossip_tts.judge.remembered`)."""

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)
        self.references = [Path(p) for p in self.references]
        self.real = None if self.real is None else Path(self.real)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"judge: folder not found: {self.folder}")
        if self.real is not None and not self.real.is_dir():
            raise FileNotFoundError(f"judge: --real folder not found: {self.real}")
        check_codec_name(self.codec)

    @property
    def heard_before_path(self) -> Path | None:
        """Where the control clips' answers are kept (beside the built-in corpus), or None."""
        return cache_root() / HEARD_BEFORE_NAME if self.remember else None

    @property
    def plot_path(self) -> Path:
        return self.plot if self.plot is not None else self.folder / PLOT_NAME
