"""Held-out judging: every checkpoint speaks every sentence into its own folder, and one table
holds each model and one set of controls. Stand-in ears, so the [judge] extra is not needed."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import numpy as np
import torch

from gossip_tts.audio import MelCodec, write_wav
from gossip_tts.judge.held_out import HeldOutConfig, controls_heard_before, judge_checkpoints, refused_ahead
from gossip_tts.model import EchoDiT, model_config
from gossip_tts.train.trainer import MODEL_PREFIX
from peer.local.checkpoint import save_checkpoint
from tests.unit.judge_helpers import LoudnessEars


def _checkpoint(path, seed: int):
    codec = MelCodec()
    cfg = model_config("tiny", codec.latent_dim)
    torch.manual_seed(seed)
    model = EchoDiT(cfg)
    info = {"codec": codec.name, "latent_dim": codec.latent_dim, "frame_rate": codec.frame_rate}
    save_checkpoint(path, {MODEL_PREFIX + k: v for k, v in model.state_dict().items()},
                    {"model_config": asdict(cfg), "step": 1, "codec": info, "frames_per_text_byte": 2.0})
    return path


def _voice(root):
    (root / "wavs").mkdir(parents=True)
    rows = {"h1": "loud", "h2": "loud again", "ref": "the reference"}
    for i, key in enumerate(rows):
        t = np.arange(int(22050 * 0.4)) / 22050
        write_wav(root / "wavs" / f"{key}.wav", (0.3 * np.sin(2 * np.pi * (200 + 50 * i) * t)).astype(np.float32), 22050)
    (root / "metadata.csv").write_text("".join(f"{k}|{v}\n" for k, v in rows.items()), encoding="utf-8")
    return root


def _config(tmp_path):
    voice = _voice(tmp_path / "voice")
    return HeldOutConfig(checkpoints={"base": _checkpoint(tmp_path / "a", 0), "fine-tuned": _checkpoint(tmp_path / "b", 1)},
                         sentences=[("h1", "loud"), ("h2", "loud again")], voice=voice,
                         reference=voice / "wavs" / "ref.wav", out=tmp_path / "spoken", synth_steps=2)


def test_each_model_speaks_every_sentence_and_one_table_holds_models_and_controls(tmp_path):
    cfg = _config(tmp_path)
    lines: list[str] = []
    sets = judge_checkpoints(cfg, lines.append, ears=LoudnessEars(), tell=lambda _line: None)
    assert [s.name for s in sets] == ["base", "fine-tuned", "real", "mel codec", "noise"]
    for label in ("base", "fine-tuned"):
        assert sorted(p.name for p in (cfg.out / label / "wavs").iterdir()) == ["h1.wav", "h2.wav"]
        assert (cfg.out / label / "metadata.csv").read_text(encoding="utf-8") == "h1|loud\nh2|loud again\n"
    by_name = {s.name: s for s in sets}
    assert by_name["real"].wer < 1.0  # the stand-in hears the real tones, so the control scores
    doc = json.loads(lines[-1].removeprefix("judge: "))
    assert set(doc) == {"base", "fine-tuned", "controls"} and set(doc["controls"]) == {"real", "mel codec", "noise"}
    assert [line.split()[0] for line in lines[2:7]] == ["base", "fine-tuned", "real", "mel", "noise"]


def test_without_the_extra_it_says_so_in_one_line_and_returns_none(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pocketsphinx", None)
    lines: list[str] = []
    assert judge_checkpoints(_config(tmp_path), lines.append) is None
    assert lines == ["no judge table: gossip-tts judge needs the [judge] extra (pocketsphinx is not installed): "
                     "pip install 'gossip-tts[judge]'"]


def test_a_sentence_a_model_refuses_is_left_out_for_every_model(tmp_path):
    cfg = _config(tmp_path)
    cfg.sentences.append(("h3", "loud " * 300))  # longer than the tiny model's longest clip
    assert refused_ahead(cfg) == {"base": {"h3"}, "fine-tuned": {"h3"}}  # known before either speaks
    lines: list[str] = []
    sets = judge_checkpoints(cfg, lines.append, ears=LoudnessEars())
    assert all([c.key for c in s.clips] == ["h1", "h2"] for s in sets)
    assert sum("cannot speak h3, left out" in line for line in lines) == 2  # both models refused it
    assert (cfg.out / "base" / "metadata.csv").read_text(encoding="utf-8") == "h1|loud\nh2|loud again\n"


def test_a_line_per_clip_spoken_and_scored_with_the_time_left(tmp_path):
    told: list[str] = []
    judge_checkpoints(_config(tmp_path), lambda _line: None, ears=LoudnessEars(), tell=told.append)
    assert [line.split(" (")[0].rsplit(" ", 1)[0] for line in told] == [
        "speaking base: 1/2", "speaking base: 2/2", "speaking fine-tuned: 1/2", "speaking fine-tuned: 2/2",
        "scoring base: 1/2", "scoring base: 2/2", "scoring fine-tuned: 1/2", "scoring fine-tuned: 2/2",
        "scoring real: 1/2", "scoring real: 2/2", "scoring mel codec: 1/2", "scoring mel codec: 2/2",
        "scoring noise: 1/2", "scoring noise: 2/2"], told
    assert "left to speak)" in told[0] and told[3].endswith("(~0 s left to speak)"), told
    assert "left to hear)" in told[4] and told[-1].endswith(", ~0 s left to hear)"), told


def test_controls_are_heard_once_then_recalled_and_a_new_reference_rescored(tmp_path):
    cfg = _config(tmp_path)
    cfg.heard_before = tmp_path / "cache" / "heard.json"
    first_ears, again_ears = LoudnessEars(), LoudnessEars()
    assert controls_heard_before(cfg, first_ears.identity()) == 0
    first = judge_checkpoints(cfg, lambda _line: None, ears=first_ears, tell=lambda _line: None)
    assert controls_heard_before(cfg, first_ears.identity()) == 3 * 2  # told before any model speaks, for an estimate
    told: list[str] = []
    again = judge_checkpoints(cfg, lambda _line: None, ears=again_ears, tell=told.append)
    assert len(first_ears.heard) == 2 * 2 + 3 * 2  # two models and three controls, two sentences each
    assert len(again_ears.heard) == 2 * 2, "the second run heard its controls again"
    assert sum(line.endswith(", recalled)") for line in told) == 3 * 2, told
    assert "judge: 6 control clips heard before" in "\n".join(told)
    assert [s.overall() for s in again[2:]] == [s.overall() for s in first[2:]]

    cfg.reference = cfg.voice / "wavs" / "h1.wav"  # another voice: similarity to it is scored afresh
    other = judge_checkpoints(cfg, lambda _line: None, ears=LoudnessEars(), tell=lambda _line: None)
    cfg.heard_before = None
    fresh = judge_checkpoints(cfg, lambda _line: None, ears=LoudnessEars(), tell=lambda _line: None)
    assert [s.similarity for s in other[2:]] != [s.similarity for s in first[2:]]
    assert [s.overall() for s in other[2:]] == [s.overall() for s in fresh[2:]]
