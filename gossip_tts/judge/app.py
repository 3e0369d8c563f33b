"""`gossip-tts judge`: does a folder of clips say its words, in the target voice, cleanly?

Scores the folder and its controls (real recordings, their codec round trip, noise; see
`clips`) with the same ears, so every figure sits between a ceiling and a floor measured here.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from gossip_tts.audio.registry import load_codec
from gossip_tts.audio.base import Codec

from .clips import Clip, codec_round_trip, matching_real, noise_like, read_folder, read_references
from .config import JudgeConfig
from .ears import Ears
from .remembered import RememberingEars
from .report import clip_table, json_line, overall_table, write_plot
from .score import ClipScore, Progress, SetScore, score_set, voice_of

@dataclass(frozen=True)
class JudgeReport:
    judged: SetScore
    controls: list[SetScore]

    @property
    def sets(self) -> list[SetScore]:
        return [self.judged, *self.controls]


def load_ears(ears: Ears | None = None) -> Ears:
    """`ears`, or the `[judge]` extra's models (an ImportError naming the extra without it)."""
    if ears is not None:
        return ears
    from .packaged_ears import PackagedEars

    return PackagedEars()


def control_sets(judged: list[Clip], real: Path | None, codec: Codec | None, seed: int) -> list[tuple[str, list[Clip]]]:
    """The controls' clips by name: the real recordings of the judged ids and their codec round trip
    (with `real`), then noise. Building them is quick; hearing them is what takes time."""
    sets: list[tuple[str, list[Clip]]] = []
    if real is not None:
        real_clips, raw = matching_real(judged, real)
        sets.append(("real", real_clips))
        if codec is not None:
            sets.append((f"{codec.name} codec", codec_round_trip(real_clips, raw, codec)))
    sets.append(("noise", noise_like(judged, seed)))
    return sets


def score_controls(judged: list[Clip], ears: Ears, voice: np.ndarray | None, real: Path | None, codec: Codec | None,
                   seed: int, progress: Progress | None = None) -> list[SetScore]:
    """The real recordings of the judged ids and their codec round trip (with `real`), then noise."""
    return [score_set(name, ears, clips, voice, progress) for name, clips in control_sets(judged, real, codec, seed)]


def judge(cfg: JudgeConfig, ears: Ears | None = None, tell: Callable[[str], None] = lambda line: None) -> JudgeReport:
    """Score the folder and its controls; `ears` defaults to the `[judge]` extra's models. `tell`
    hears a line per clip scored: a folder and its controls take minutes on a CPU."""
    ears = load_ears(ears)  # first, so that a missing extra is reported before any audio is read
    judged_clips = read_folder(cfg.folder)
    voice = voice_of(ears, read_references(cfg.references))
    progress = clip_progress(tell)
    judged = score_set(cfg.folder.name or "judged", ears, judged_clips, voice, progress)
    codec = load_codec(cfg.codec, weights=cfg.codec_weights) if cfg.real is not None else None
    control_ears = RememberingEars(ears, cfg.heard_before_path)
    controls = score_controls(judged_clips, control_ears, voice, cfg.real, codec, cfg.seed, progress)
    control_ears.save()
    if control_ears.recalled:
        tell(f"judge: {control_ears.recalled} control clips heard before, their answers kept in {cfg.heard_before_path}")
    return JudgeReport(judged, controls)


def clip_progress(tell: Callable[[str], None], start: float | None = None,
                  note: Callable[[str, ClipScore], str] | None = None) -> Progress:
    """`scoring SET: i/n KEY (WER w, s s)`, the seconds counted from `start` (default: now); `note`
    adds its words after the seconds."""
    start = time.monotonic() if start is None else start

    def progress(name: str, i: int, n: int, clip: ClipScore) -> None:
        extra = note(name, clip) if note is not None else ""
        tell(f"scoring {name}: {i}/{n} {clip.key} (WER {clip.words.rate:.2f}, {time.monotonic() - start:.0f} s"
             f"{', ' + extra if extra else ''})")

    return progress


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def print_report(report: JudgeReport, emit: Callable[[str], None]) -> None:
    """Both tables: every clip of the judged set, then every set's overall figures."""
    for line in clip_table(report.judged):
        emit(line)
    emit("")
    for line in overall_table(report.sets):
        emit(line)


def run(cfg: JudgeConfig, emit: Callable[[str], None] = print, ears: Ears | None = None,
        tell: Callable[[str], None] | None = None) -> JudgeReport:
    """Judge, then print the per-clip table, the overall table, the plot's path and `judge: {json}`;
    the progress lines (`tell`) go to stderr by default, so stdout stays the report."""
    report = judge(cfg, ears, tell or _to_stderr)
    print_report(report, emit)
    if cfg.plot_enabled:
        written = write_plot(report.sets, cfg.plot_path, emit)
        if written is not None:
            emit(f"plot: {written}")
    emit(json_line(report.judged, report.controls))
    return report
