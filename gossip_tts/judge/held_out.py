"""Judging checkpoints on held-out sentences: each model speaks every sentence in the voice of
one reference clip, and the judge scores every model beside one set of controls (the real
recordings of those sentences, their codec round trip, noise), so "the model does not yet say
the words" is a number that moves between a base and a fine-tuned model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gossip_tts.audio.registry import check_codec_name, load_codec

from .app import load_ears, score_controls
from .clips import read_folder, read_references
from .ears import Ears
from .report import overall_table
from .score import SetScore, score_set, voice_of


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

    def __post_init__(self) -> None:
        self.checkpoints = {label: Path(p) for label, p in self.checkpoints.items()}
        self.voice, self.reference, self.out = Path(self.voice), Path(self.reference), Path(self.out)
        if not self.checkpoints or not self.sentences:
            raise ValueError("held-out judging needs at least one checkpoint and one sentence")
        check_codec_name(self.codec)


def speak(cfg: HeldOutConfig, label: str, emit: Callable[[str], None]) -> set[str]:
    """Speak every sentence with that checkpoint into OUT/<label>/wavs/; returns the ids it refused.

    A model refuses a sentence longer than the longest clip it was trained on (synthesize's
    length check); that sentence is reported and left out for every model.
    """
    from gossip_tts.apps.synth_app import SynthConfig
    from gossip_tts.apps.synth_app import run as synthesize

    (cfg.out / label / "wavs").mkdir(parents=True, exist_ok=True)
    refused = set()
    for key, text in cfg.sentences:
        synth = SynthConfig(checkpoint=cfg.checkpoints[label], text=text, out=cfg.out / label / "wavs" / f"{key}.wav",
                            reference=cfg.reference, steps=cfg.synth_steps, seed=cfg.seed, device=cfg.device,
                            codec_weights=cfg.codec_weights)
        try:
            synthesize(synth, emit=lambda _line: None)
        except ValueError as exc:
            emit(f"judge: {label} cannot speak {key}, left out: {exc}")
            refused.add(key)
    return refused


def judge_checkpoints(cfg: HeldOutConfig, emit: Callable[[str], None] = print,
                      ears: Ears | None = None) -> list[SetScore] | None:
    """Print the table (one row per model, then the controls) and `judge: {json}`; returns the rows.

    Without the `[judge]` extra it says so in one line and returns None, so a script that ends
    with it still finishes.
    """
    try:
        ears = load_ears(ears)
    except ImportError as exc:
        emit(f"no judge table: {exc}")
        return None
    refused = set().union(*(speak(cfg, label, emit) for label in cfg.checkpoints))
    kept = [(key, text) for key, text in cfg.sentences if key not in refused]
    if not kept:
        emit("no judge table: every model refused every held-out sentence")
        return None
    for label in cfg.checkpoints:  # the sentences every model spoke, so that the rows compare
        (cfg.out / label / "metadata.csv").write_text("".join(f"{k}|{t}\n" for k, t in kept), encoding="utf-8")
    voice = voice_of(ears, read_references([cfg.reference]))
    models = [score_set(label, ears, read_folder(cfg.out / label), voice) for label in cfg.checkpoints]
    clips = read_folder(cfg.out / next(iter(cfg.checkpoints)))
    controls = score_controls(clips, ears, voice, cfg.voice, load_codec(cfg.codec, weights=cfg.codec_weights), cfg.seed)
    emit(f"judge on {len(kept)} held-out sentence(s), voice of {cfg.reference.name} ({ears.name}):")
    for line in overall_table(models + controls):
        emit(line)
    doc = {s.name: s.overall() for s in models}
    doc["controls"] = {s.name: s.overall() for s in controls}
    emit("judge: " + json.dumps(doc, sort_keys=True))
    return models + controls
