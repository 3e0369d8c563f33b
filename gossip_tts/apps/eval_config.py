"""`EvalConfig`, the settings of `gossip-tts eval`, in a module that imports no torch, so that
`eval --help` reads its defaults from here (`gossip_tts.cli.options`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gossip_tts.train.weights import check_weights


@dataclass
class EvalConfig:
    checkpoint: Path
    sources: list[str] = field(default_factory=list)
    device: str = "cpu"
    batch_size: int = 16
    max_samples: int = 256
    """Evaluate on at most this many clips (the first ones, in file order)."""
    weights: str = "average"
    """"average" (the peer's averaged weights, where the checkpoint has them) or "live" (gossip_tts.train.weights)."""

    def __post_init__(self) -> None:
        self.checkpoint = Path(self.checkpoint)
        if not self.sources:
            raise ValueError("eval needs at least one --data source")
        if self.batch_size <= 0 or self.max_samples <= 0:
            raise ValueError("batch_size and max_samples must be > 0")
        check_weights(self.weights)
