"""Ears that remember: an answer is given again only for the same clip heard by the same ears."""

from __future__ import annotations

import numpy as np

from gossip_tts.judge.remembered import MAX_CLIPS, RememberingEars
from tests.unit.judge_helpers import LoudnessEars

CLIP = 0.3 * np.sin(np.linspace(0, 200, 1600)).astype(np.float32)


class NewerEars(LoudnessEars):
    def identity(self) -> str:
        return "stand-in, a newer version"


def _hear(ears: RememberingEars, wav: np.ndarray) -> tuple[str, list[float], float]:
    return ears.transcribe(wav), ears.embed(wav).tolist(), ears.quality(wav)


def test_answers_come_back_from_the_file_for_the_same_clip_and_ears(tmp_path):
    path = tmp_path / "heard.json"
    first = RememberingEars(LoudnessEars(), path)
    answers = _hear(first, CLIP)
    first.save()
    inner = LoudnessEars()
    again = RememberingEars(inner, path)
    assert again.knows(CLIP) and _hear(again, CLIP) == answers
    assert inner.heard == [] and again.recalled == 1


def test_other_audio_or_other_ears_are_heard_afresh(tmp_path):
    path = tmp_path / "heard.json"
    first = RememberingEars(LoudnessEars(), path)
    _hear(first, CLIP)
    first.save()
    newer = RememberingEars(NewerEars(), path)
    assert not newer.knows(CLIP)
    louder = RememberingEars(LoudnessEars(), path)
    assert not louder.knows(CLIP * 2) and not louder.knows(CLIP[:-1])


def test_without_a_path_or_with_an_unreadable_file_nothing_is_recalled(tmp_path):
    ears = RememberingEars(LoudnessEars(), None)
    _hear(ears, CLIP)
    ears.save()
    assert list(tmp_path.iterdir()) == []
    broken = tmp_path / "heard.json"
    broken.write_text("{not json", encoding="utf-8")
    assert not RememberingEars(LoudnessEars(), broken).knows(CLIP)


def test_the_file_keeps_only_the_most_recently_used_clips(tmp_path):
    path = tmp_path / "heard.json"
    ears = RememberingEars(LoudnessEars(), path)
    clips = [np.full(16, i / 1000, dtype=np.float32) for i in range(MAX_CLIPS + 2)]
    for wav in clips:
        _hear(ears, wav)
    _hear(ears, clips[0])  # used again: kept
    ears.save()
    kept = RememberingEars(LoudnessEars(), path)
    assert kept.knows(clips[0]) and kept.knows(clips[-1])
    assert not kept.knows(clips[1]) and not kept.knows(clips[2])


def test_the_packaged_ears_are_known_by_their_packages_versions_and_settings():
    from importlib.metadata import version

    from gossip_tts.judge.packaged_ears import HOW_THEY_LISTEN, LISTENING_PACKAGES, packaged_identity

    identity = packaged_identity()
    assert f" r{HOW_THEY_LISTEN} " in identity and all(f"{name}=" in identity for name in LISTENING_PACKAGES)
    assert f"torch={version('torch')}" in identity and f"numpy={version('numpy')}" in identity
