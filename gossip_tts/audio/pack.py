"""`pack`: an LJSpeech-style folder of one speaker -> latent tar shards for training.

Input layout (LJSpeech's own):

    SRC_DIR/metadata.csv   one clip a line, `id|text` or `id|text|normalized text`
    SRC_DIR/wavs/<id>.wav

Text: the third column (LJSpeech's normalized text, numbers spelled out) when present and
non-empty, else the second. Lines are split on `|` by hand, not with the csv module,
because LJSpeech transcripts contain unbalanced quotes.

A clip with a missing or unreadable wav, empty text, empty audio, a duplicate id, or an id
that cannot be a shard key is skipped and reported with its reason; it never stops the run.

Speaker reference: each clip's reference latent is the latent of the *next* usable clip in
id order (the last clip takes the first), so it is always a different clip of the same
speaker, the choice is deterministic, and only two latents are held in memory at a time.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from gossip_tts.data.sample import CodecInfo, LatentSample
from gossip_tts.data.tars import ShardWriter
from gossip_tts.data.swarm_manifest import write_manifest
from peer.shards.manifest import MANIFEST_NAME, Manifest

from gossip_tts.audio.pack_config import PackConfig

from . import load_codec
from .base import Codec
from .io import read_wav

_KEY_RE = re.compile(r"^[A-Za-z0-9_\-]{1,80}$")


@dataclass
class PackReport:
    """What `pack` did."""

    codec: CodecInfo
    clips: int = 0
    """Samples written."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(clip id or line reference, reason) for every clip left out."""
    shards: list[Path] = field(default_factory=list)
    audio_seconds: float = 0.0
    """Total duration of the packed clips' audio."""
    manifest: Manifest | None = None
    """The swarm manifest written next to the tars (every tar of `out_dir`): peers share them by its hash."""

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def skipped_by_reason(self) -> dict[str, int]:
        """Counts per reason, with per-clip details (after a colon) folded together."""
        return dict(Counter(reason.split(":")[0] for _, reason in self.skipped))

    def summary(self) -> str:
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.skipped_by_reason().items()))
        return (
            f"packed {self.clips} clips ({self.audio_seconds / 60:.1f} min of audio, codec {self.codec.codec}) "
            f"into {len(self.shards)} shard(s); skipped {self.n_skipped}" + (f" ({reasons})" if reasons else "")
        )


class TooFewClips(ValueError):
    """Fewer than two clips are left to pack; `skipped` holds each clip left out and why, so the
    user learns which clips to mend, not only that too few were left."""

    def __init__(self, message: str, skipped: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.skipped = list(skipped)


@dataclass
class _Clip:
    key: str
    text: str
    wav: Path


def read_metadata(src_dir: Path, skipped: list[tuple[str, str]]) -> list[_Clip]:
    """Usable rows of `metadata.csv`, sorted by id; appends the others to `skipped`."""
    meta_path = src_dir / "metadata.csv"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path} not found: pack expects an LJSpeech-style folder (metadata.csv, wavs/)")
    wav_dir = src_dir / "wavs"
    if not wav_dir.is_dir():
        raise FileNotFoundError(f"{wav_dir} not found: pack expects the clips in a wavs/ folder")
    clips: dict[str, _Clip] = {}
    for lineno, line in enumerate(meta_path.read_text(encoding="utf-8-sig").splitlines(), start=1):
        if not line.strip():
            continue
        cols = line.split("|")
        key = cols[0].strip()
        if len(cols) < 2 or not key:
            skipped.append((f"metadata.csv:{lineno}", "malformed line: want id|text or id|text|normalized text"))
            continue
        text = cols[2].strip() if len(cols) >= 3 and cols[2].strip() else cols[1].strip()
        if not text:
            skipped.append((key, "empty text"))
        elif not _KEY_RE.match(key) or key.startswith("__"):
            skipped.append((key, "bad id: a shard key must be 1-80 letters, digits, '_' or '-'"))
        elif key in clips:
            skipped.append((key, f"duplicate id: line {lineno} repeats an earlier line"))
        elif not (wav_dir / f"{key}.wav").is_file():
            skipped.append((key, "missing wav"))
        else:
            clips[key] = _Clip(key, text, wav_dir / f"{key}.wav")
    return [clips[k] for k in sorted(clips)]


def _check_out_dir(cfg: PackConfig) -> None:
    out = Path(cfg.out_dir)
    existing = sorted(out.glob(f"{cfg.shard_prefix}-*.tar")) if out.is_dir() else []
    if not existing:
        return
    if not cfg.overwrite:
        raise FileExistsError(
            f"{out} already holds {len(existing)} shard(s) named {cfg.shard_prefix}-*.tar; "
            "remove them, choose another output folder, or set overwrite"
        )
    for p in existing:
        p.unlink()


def pack(cfg: PackConfig, progress: Callable[[int, int], None] | None = None) -> PackReport:
    """Encode every usable clip of `cfg.src_dir` and write latent tar shards to `cfg.out_dir`.

    `progress(done, total)` is called after each clip is encoded or skipped as unreadable,
    `total` being the clips that passed the metadata checks.
    """
    src = Path(cfg.src_dir)
    if not src.is_dir():
        raise FileNotFoundError(f"source folder not found: {src}")
    skipped: list[tuple[str, str]] = []
    clips = read_metadata(src, skipped)
    if len(clips) < 2:
        raise TooFewClips(
            f"{src} has {len(clips)} usable clip(s); pack needs at least two of the speaker, "
            "because each clip's speaker reference comes from a different clip", skipped)
    _check_out_dir(cfg)
    codec = load_codec(cfg.codec, weights=cfg.codec_weights, device=cfg.device)
    info = CodecInfo(codec=codec.name, latent_dim=int(codec.latent_dim), frame_rate=float(codec.frame_rate))
    report = PackReport(codec=info, skipped=skipped)
    speaker = cfg.speaker_name

    first: tuple[_Clip, np.ndarray] | None = None
    pending: tuple[_Clip, np.ndarray, float] | None = None
    with ShardWriter(cfg.out_dir, info, shard_size=cfg.shard_size, prefix=cfg.shard_prefix) as writer:

        def emit(clip: _Clip, latent: np.ndarray, seconds: float, ref_clip: _Clip, ref: np.ndarray) -> None:
            meta = {"audio_seconds": round(seconds, 4), "ref_key": ref_clip.key}
            writer.write(LatentSample(key=clip.key, latent=latent, ref=ref, text=clip.text, speaker=speaker, meta=meta))
            report.clips += 1
            report.audio_seconds += seconds

        for done, clip in enumerate(clips, start=1):
            encoded = _encode_clip(codec, clip, skipped)
            if progress is not None:
                progress(done, len(clips))
            if encoded is None:
                continue
            latent, seconds = encoded
            if first is None:
                first = (clip, latent)
            if pending is not None:
                emit(*pending, clip, latent)
            pending = (clip, latent, seconds)

        if pending is None or first is None or pending[0] is first[0]:
            raise TooFewClips(
                f"{src} has {0 if first is None else 1} readable clip(s); pack needs at least two of the "
                "speaker, because each clip's speaker reference comes from a different clip", skipped)
        emit(*pending, *first)
    report.shards = writer.close()
    report.manifest = write_manifest(Path(cfg.out_dir))
    return report


def run(cfg: PackConfig, emit: Callable[[str], None] = print) -> PackReport:
    """`gossip-tts pack`: pack with a progress line every 10%, a summary at the end and a line for
    every clip left out (also when too few are left to pack)."""

    def progress(done: int, total: int) -> None:
        if done == total or done % max(1, total // 10) == 0:
            emit(f"encoded {done}/{total} clips")

    try:
        report = pack(cfg, progress=progress)
    except TooFewClips as exc:  # the clips left out are why: name them before the error line
        for key, reason in exc.skipped:
            emit(f"  skipped {key}: {reason}")
        raise
    emit(report.summary())
    for key, reason in report.skipped:
        emit(f"  skipped {key}: {reason}")
    if report.manifest is not None:
        emit(f"wrote {MANIFEST_NAME}: share this corpus with --data {report.manifest.swarm_id}")
    return report


def _encode_clip(codec: Codec, clip: _Clip, skipped: list[tuple[str, str]]) -> tuple[np.ndarray, float] | None:
    """(latent, seconds) of one clip, or None after recording why it was skipped."""
    try:
        wav, sr = read_wav(clip.wav)
    except (OSError, ValueError) as e:
        skipped.append((clip.key, f"unreadable wav: {e}"))
        return None
    if wav.size == 0 or not np.isfinite(wav).all():
        skipped.append((clip.key, "empty audio" if wav.size == 0 else "unreadable wav: non-finite samples"))
        return None
    latent = codec.encode(wav, sr)
    if not np.isfinite(latent.astype(np.float16)).all():
        skipped.append((clip.key, "bad latent: non-finite or beyond float16 range"))
        return None
    return latent, wav.size / sr
