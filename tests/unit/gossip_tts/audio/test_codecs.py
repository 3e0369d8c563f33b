"""`load_codec`: names, and the errors a user sees for a wrong name or a missing extra."""

from __future__ import annotations

import sys

import pytest

from gossip_tts.audio import MelCodec, codec_names, load_codec


def test_mel_by_name() -> None:
    assert isinstance(load_codec("mel"), MelCodec)


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(ValueError, match="'wavenet'.*mel, dac, echo"):
        load_codec("wavenet")
    assert codec_names() == ("mel", "dac", "echo")


def test_mel_refuses_weights() -> None:
    with pytest.raises(ValueError, match="no weights"):
        load_codec("mel", weights="x.pth")


def test_dac_without_the_extra_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "dac", None)  # makes `import dac` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'gossip-tts\[dac\]'"):
        load_codec("dac", weights="whatever.pth")
