"""The [judge] extra's real ears on real speech and on controls that must score worse: noise for
words and quality, another voice (espeak-ng) for similarity. Skipped without the extra or the clips."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gossip_tts.judge import JudgeConfig, judge, run
from gossip_tts.judge.clips import noise_like, read_clip_audio, read_folder, to_ear_rate
from gossip_tts.judge.score import cosine, score_set
from tests.paths import REPO

LJ_MINI = REPO.parent / "shared" / "data" / "ljspeech-mini"
KEYS = ["LJ001-0002", "LJ001-0004", "LJ001-0008"]  # short clips, so the test stays fast


@pytest.fixture(scope="module")
def ears():
    from gossip_tts.judge.packaged_ears import PackagedEars

    try:
        return PackagedEars()
    except ImportError as exc:
        pytest.skip(f"the [judge] extra is not installed: {exc}")


def _lj_folder(root: Path, keys: list[str]) -> Path:
    """A small LJSpeech-style folder of links to some real clips."""
    if not (LJ_MINI / "metadata.csv").is_file():
        pytest.skip(f"real speech not found at {LJ_MINI} (../shared/data/ljspeech-mini is not beside this checkout)")
    rows = {line.split("|")[0]: line for line in (LJ_MINI / "metadata.csv").read_text(encoding="utf-8").splitlines()}
    (root / "wavs").mkdir(parents=True)
    for key in keys:
        (root / "wavs" / f"{key}.wav").symlink_to(LJ_MINI / "wavs" / f"{key}.wav")
    (root / "metadata.csv").write_text("".join(rows[k] + "\n" for k in keys), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def lj_folder(tmp_path_factory) -> Path:
    return _lj_folder(tmp_path_factory.mktemp("lj"), KEYS)


def _lj(key: str) -> np.ndarray:
    return to_ear_rate(*read_clip_audio(LJ_MINI / "wavs" / f"{key}.wav"))


def test_real_speech_scores_a_wer_well_below_noise(ears, lj_folder):
    clips = read_folder(lj_folder)
    real, noise = score_set("real", ears, clips, None), score_set("noise", ears, noise_like(clips, 0), None)
    assert real.wer < 0.5, [c.heard for c in real.clips]
    assert noise.wer > 0.9 and noise.cer > 0.9
    assert real.dnsmos > noise.dnsmos + 1.0


def test_a_clip_against_itself_scores_similarity_about_one(ears, lj_folder):
    wav = _lj(KEYS[0])
    assert cosine(ears.embed(wav), ears.embed(wav)) == pytest.approx(1.0, abs=1e-6)


def test_another_voice_scores_lower_than_the_same_speakers_other_clip(ears, lj_folder, tmp_path):
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    text = read_folder(lj_folder)[0].text
    subprocess.run([espeak, "-v", "en-us", "-w", str(tmp_path / "espeak.wav"), text], check=True, capture_output=True)
    target = ears.embed(_lj(KEYS[0]))
    same_speaker = cosine(ears.embed(_lj(KEYS[1])), target)
    other_voice = cosine(ears.embed(to_ear_rate(*read_clip_audio(tmp_path / "espeak.wav"))), target)
    assert same_speaker > other_voice + 0.1, (same_speaker, other_voice)


def test_every_figure_is_deterministic_for_a_fixed_input(ears, tmp_path):
    folder = _lj_folder(tmp_path / "one", KEYS[:1])  # one clip: each run scores it four times (folder and controls)
    cfg = JudgeConfig(folder=folder, references=[LJ_MINI / "wavs" / "LJ001-0010.wav"], real=folder,
                      plot=tmp_path / "judge.png")
    lines: list[str] = []
    first = run(cfg, lines.append, ears=ears)
    again = judge(cfg)  # fresh ears: nothing carried over from the clips decoded before
    assert [s.clips for s in first.sets] == [s.clips for s in again.sets]
    doc = json.loads(lines[-1].removeprefix("judge: "))
    assert doc["wer"] < doc["controls"]["noise"]["wer"]
    assert doc["similarity"] > doc["controls"]["noise"]["similarity"]
    assert doc["controls"]["real"]["wer"] == doc["wer"]  # the folder is its own real recordings here
