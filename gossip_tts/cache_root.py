"""Where gossip-tts keeps what it builds once and reuses between runs (the built-in corpus, the
judge's answers on clips heard before)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$GOSSIP_TTS_CACHE`, else `~/.cache/gossip-tts`."""
    return Path(os.environ.get("GOSSIP_TTS_CACHE") or Path.home() / ".cache" / "gossip-tts").expanduser()
