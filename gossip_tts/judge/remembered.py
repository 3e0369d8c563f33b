"""Ears that remember: answers on a clip heard before come from a small file, not from the models.

The held-out judge's controls (the real recordings, their codec round trip, noise) are the same
clips run after run, and hearing them is much of the judge's time on a CPU. An answer depends only
on the clip and the ears (`Ears`), so it is keyed by the clip's audio bytes and `Ears.identity`
(models, versions, settings). The reference voice and the texts enter the scores after the ears
(a cosine to the kept embedding, an edit distance to the kept transcript), so a changed reference
or text is scored afresh without hearing the clip again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from .ears import Ears

FORMAT = 1
"""Raise it when the file's layout changes; a file of another format is started afresh."""

ANSWERS = frozenset({"heard", "embedding", "quality"})

MAX_CLIPS = 200
"""Clips kept, the most recently used; the oldest are dropped, so the file stays small."""


class RememberingEars(Ears):
    """`ears`, with every answer kept and given again for the same clip; `save` writes them to `path`
    (JSON) for the next run. Without a path they are kept for this run only."""

    def __init__(self, ears: Ears, path: Path | None) -> None:
        self._ears = ears
        self.name = ears.name
        self.path = None if path is None else Path(path)
        self._clips = {} if self.path is None else _load(self.path)
        self.recalled = 0
        """Clips whose words came from the file rather than the models."""

    def identity(self) -> str:
        return self._ears.identity()

    def knows(self, wav: np.ndarray) -> bool:
        """Whether every answer on this clip is kept (hearing it would take no time)."""
        return ANSWERS <= set(self._clips.get(clip_key(self._ears.identity(), wav), {}))

    def transcribe(self, wav: np.ndarray) -> str:
        kept = self._entry(wav)
        if "heard" in kept:
            self.recalled += 1
        else:
            kept["heard"] = self._ears.transcribe(wav)
        return kept["heard"]

    def embed(self, wav: np.ndarray) -> np.ndarray:
        kept = self._entry(wav)
        if "embedding" not in kept:
            kept["embedding"] = _encode(np.asarray(self._ears.embed(wav), dtype=np.float64))
        return _decode(kept["embedding"])

    def quality(self, wav: np.ndarray) -> float:
        kept = self._entry(wav)
        if "quality" not in kept:
            kept["quality"] = float(self._ears.quality(wav))
        return kept["quality"]

    def save(self) -> None:
        """Write the kept answers (the newest MAX_CLIPS) in one step, so a reader never sees half a file."""
        if self.path is None:
            return
        clips = dict(list(self._clips.items())[-MAX_CLIPS:])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, "clips": clips}, f)
        os.replace(tmp, self.path)

    def _entry(self, wav: np.ndarray) -> dict:
        key = clip_key(self._ears.identity(), wav)
        entry = self._clips.pop(key, {})
        self._clips[key] = entry  # the most recently used last
        return entry


def clip_key(identity: str, wav: np.ndarray) -> str:
    """What an answer on `wav` is kept under: the ears' identity and the clip's audio bytes."""
    audio = np.ascontiguousarray(wav)
    digest = hashlib.sha256(f"{identity}\0{audio.dtype}\0{audio.shape}\0".encode())
    digest.update(audio.tobytes())
    return digest.hexdigest()


def known_clips(path: Path, identity: str, wavs: list[np.ndarray]) -> int:
    """How many of `wavs` the file holds every answer on for ears of that identity (no ears loaded)."""
    clips = _load(Path(path))
    return sum(ANSWERS <= set(clips.get(clip_key(identity, wav), {})) for wav in wavs)


def _load(path: Path) -> dict[str, dict]:
    """The kept answers, or none when the file is absent, unreadable or of another format."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("clips"), dict):
        return {}
    return doc["clips"]


def _encode(vector: np.ndarray) -> str:
    return base64.b64encode(vector.astype("<f8").tobytes()).decode("ascii")


def _decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f8").astype(np.float64)
