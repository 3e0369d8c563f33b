"""`PackConfig`, the settings of `gossip-tts pack`, in a module that imports no torch, so that
`pack --help` reads its defaults from here (`gossip_tts.cli.options`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gossip_tts.audio.registry import check_codec_name


@dataclass
class PackConfig:
    """What to pack and how."""

    src_dir: str | Path
    """LJSpeech-style folder: `metadata.csv` and `wavs/`."""
    out_dir: str | Path
    """Where the shards go (created if absent)."""
    codec: str = "mel"
    """Codec name, one of `gossip_tts.audio.registry.AUDIO_CODECS`."""
    codec_weights: str | None = None
    """Local weights file for codecs that have weights (DAC); None lets the codec fetch its own."""
    shard_size: int = 256
    """Clips per tar shard."""
    speaker: str | None = None
    """Speaker name written into every sample; None uses the source folder's name."""
    device: str = "cpu"
    """Torch device the codec runs on."""
    overwrite: bool = False
    """Replace shards of the same name already in `out_dir` (else refuse, so stale shards never mix in)."""

    def __post_init__(self) -> None:
        self.src_dir = Path(self.src_dir)
        self.out_dir = Path(self.out_dir)
        check_codec_name(self.codec)
        if self.shard_size <= 0:
            raise ValueError(f"shard_size must be positive, got {self.shard_size}")
        if self.speaker is not None and not self.speaker.strip():
            raise ValueError("speaker name must not be blank")

    @property
    def speaker_name(self) -> str:
        return self.speaker if self.speaker is not None else Path(self.src_dir).resolve().name

    @property
    def shard_prefix(self) -> str:
        """Shards are named after the speaker, so several speakers can be packed into one folder."""
        return re.sub(r"[^A-Za-z0-9_\-]", "_", self.speaker_name) or "shard"
