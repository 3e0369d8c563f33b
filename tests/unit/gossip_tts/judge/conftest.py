"""Every judge test keeps what `gossip-tts judge` remembers (`JudgeConfig.remember`) in its own
folder, never in the user's cache, so that no test recalls another's answers."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GOSSIP_TTS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
