"""Judging checkpoints on held-out sentences: each model speaks every sentence in the voice of
one reference clip, and the judge scores every model beside one set of controls (the real
recordings of those sentences, their codec round trip, noise), so "the model does not yet say
the words" is a number that moves between a base and a fine-tuned model."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gossip_tts.audio.registry import check_codec_name, load_codec

from .app import clip_progress, control_sets, load_ears
from .clips import read_clip_audio, read_folder, read_references, to_ear_rate
from .countdown import Countdown, minutes
from .ears import Ears
from .remembered import RememberingEars, known_clips
from .report import overall_table
from .score import ClipScore, SetScore, score_set, voice_of


CONTROLS = 3
"""Control sets heard beside the models: the real recordings, their codec round trip, noise."""


@dataclass
class HeldOutConfig:
    """Which models speak which sentences, and where their clips go."""

    checkpoints: dict[str, Path]
    """Label (a table row) -> checkpoint."""
    sentences: list[tuple[str, str]]
    """(id, text) of held-out clips of `voice`: its wavs/<id>.wav are the real recordings."""
    voice: Path
    """LJSpeech-style folder holding the real recordings."""
    reference: Path
    """A clip of the voice the models were not scored on: the synthesis reference and the similarity target."""
    out: Path
    """Each model's clips go to OUT/<label>/ (an LJSpeech-style folder `gossip-tts judge` reads)."""
    synth_steps: int = 32
    seed: int = 0
    device: str = "cpu"
    codec: str = "mel"
    """The checkpoints' codec: it decodes their clips and makes the round-trip control."""
    codec_weights: str | None = None
    heard_before: Path | None = None
    """A file of the ears' answers on clips heard before (`RememberingEars`): the controls, the same
    clips run after run, are heard once and then recalled. None: they are heard every run."""

    def __post_init__(self) -> None:
        self.checkpoints = {label: Path(p) for label, p in self.checkpoints.items()}
        self.voice, self.reference, self.out = Path(self.voice), Path(self.reference), Path(self.out)
        self.heard_before = None if self.heard_before is None else Path(self.heard_before)
        if not self.checkpoints or not self.sentences:
            raise ValueError("held-out judging needs at least one checkpoint and one sentence")
        check_codec_name(self.codec)


def speak(cfg: HeldOutConfig, label: str, emit: Callable[[str], None], tell: Callable[[str], None] = lambda _: None,
          countdown: Countdown | None = None) -> set[str]:
    """Speak every sentence with that checkpoint into OUT/<label>/wavs/; returns the ids it refused.

    A model refuses a sentence longer than the longest clip it was trained on (synthesize's
    length check); that sentence is reported and left out for every model. `tell` hears a line
    per sentence, with the time left to speak at the pace so far (`countdown`).
    """
    from gossip_tts.apps.synth_app import SynthConfig
    from gossip_tts.apps.synth_app import run as synthesize

    countdown = countdown or Countdown(len(cfg.sentences))
    (cfg.out / label / "wavs").mkdir(parents=True, exist_ok=True)
    refused = set()
    for i, (key, text) in enumerate(cfg.sentences, 1):
        synth = SynthConfig(checkpoint=cfg.checkpoints[label], text=text, out=cfg.out / label / "wavs" / f"{key}.wav",
                            reference=cfg.reference, steps=cfg.synth_steps, seed=cfg.seed, device=cfg.device,
                            codec_weights=cfg.codec_weights)
        try:
            synthesize(synth, emit=lambda _line: None)
        except ValueError as exc:
            emit(f"judge: {label} cannot speak {key}, left out: {exc}")
            refused.add(key)
        countdown.tick()
        tell(f"speaking {label}: {i}/{len(cfg.sentences)} {key} ({countdown.left('speak')})")
    return refused


def judge_checkpoints(cfg: HeldOutConfig, emit: Callable[[str], None] = print, ears: Ears | None = None,
                      tell: Callable[[str], None] | None = None) -> list[SetScore] | None:
    """Print the table (one row per model, then the controls) and `judge: {json}`; returns the rows.

    `tell` (default: `emit`) hears a line per clip spoken and per clip scored, with the seconds
    since the judge began and the time left at the pace measured so far: a judge on a CPU takes
    minutes. Without the `[judge]` extra it says so in one line and returns None, so a script that
    ends with it still finishes.
    """
    tell = tell or emit
    try:
        ears = load_ears(ears)
    except ImportError as exc:
        emit(f"no judge table: {exc}")
        return None
    start = time.monotonic()
    speaking = Countdown(len(cfg.checkpoints) * len(cfg.sentences))
    refused = set().union(*(speak(cfg, label, emit, tell, speaking) for label in cfg.checkpoints))
    kept = [(key, text) for key, text in cfg.sentences if key not in refused]
    if not kept:
        emit("no judge table: every model refused every held-out sentence")
        return None
    for label in cfg.checkpoints:  # the sentences every model spoke, so that the rows compare
        (cfg.out / label / "metadata.csv").write_text("".join(f"{k}|{t}\n" for k, t in kept), encoding="utf-8")
    voice = voice_of(ears, read_references([cfg.reference]))
    spoken = {label: read_folder(cfg.out / label) for label in cfg.checkpoints}
    control_ears = RememberingEars(ears, cfg.heard_before)
    controls = control_sets(spoken[next(iter(cfg.checkpoints))], cfg.voice,
                            load_codec(cfg.codec, weights=cfg.codec_weights), cfg.seed)
    recalled = {(name, clip.key) for name, clips in controls for clip in clips if control_ears.knows(clip.wav)}
    to_hear = sum(map(len, spoken.values())) + sum(map(len, (clips for _, clips in controls))) - len(recalled)
    if recalled:
        tell(f"judge: {len(recalled)} control clips heard before, their answers kept in {cfg.heard_before}")
    progress = _hearing_progress(tell, start, Countdown(to_hear), recalled)
    models = [score_set(label, ears, clips, voice, progress) for label, clips in spoken.items()]
    control_scores = [score_set(name, control_ears, clips, voice, progress) for name, clips in controls]
    control_ears.save()
    emit(f"judge on {len(kept)} held-out sentence(s), voice of {cfg.reference.name} ({ears.name}), "
         f"{minutes(time.monotonic() - start)}:")
    for line in overall_table(models + control_scores):
        emit(line)
    doc = {s.name: s.overall() for s in models}
    doc["controls"] = {s.name: s.overall() for s in control_scores}
    emit("judge: " + json.dumps(doc, sort_keys=True))
    return models + control_scores


def controls_heard_before(cfg: HeldOutConfig, identity: str) -> int:
    """How many control clips `cfg.heard_before` should recall, before any model speaks (for an estimate).

    Counted from the real recordings the file knows, each standing for its three controls (real,
    codec, noise): the noise follows the first model's clip lengths, known only once it has spoken.
    """
    if cfg.heard_before is None:
        return 0
    real = [to_ear_rate(*read_clip_audio(cfg.voice / "wavs" / f"{key}.wav")) for key, _text in cfg.sentences]
    return CONTROLS * known_clips(cfg.heard_before, identity, real)


def refused_ahead(cfg: HeldOutConfig) -> dict[str, set[str]]:
    """Per checkpoint, the sentence ids it will refuse (synthesize's text and length checks), read
    from the checkpoints' records before any speaks: a sentence one refuses is heard from none."""
    from gossip_tts.apps.synth_app import estimate_frames
    from gossip_tts.data.text import encode_text
    from peer.local.checkpoint import load_checkpoint

    refused: dict[str, set[str]] = {}
    for label, path in cfg.checkpoints.items():
        _tensors, meta = load_checkpoint(path)
        model, rate = meta["model_config"], meta["codec"]["frame_rate"]
        refused[label] = {key for key, text in cfg.sentences
                          if len(encode_text(text, model["text_frontend"])) > model["max_text_bytes"]
                          or estimate_frames(text, meta, rate) > model["max_frames"]}
    return refused


def _hearing_progress(tell: Callable[[str], None], start: float, countdown: Countdown, recalled: set[tuple[str, str]]):
    """`clip_progress` lines that end with the time left to hear (clips recalled from the file take none)."""

    def note(name: str, clip: ClipScore) -> str:
        if (name, clip.key) in recalled:
            return "recalled"
        countdown.tick()
        return countdown.left("hear")

    return clip_progress(tell, start, note)
