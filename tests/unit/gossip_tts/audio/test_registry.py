"""The audio codec table is the one list of codec names: `load_codec`, the configs that name a
codec and the CLI's `--codec` choices all read it."""

from __future__ import annotations

import click
import pytest

from gossip_tts.audio import registry
from gossip_tts.audio.registry import AudioCodec, codec_names, load_codec
from gossip_tts.judge.held_out import HeldOutConfig
from gossip_tts.audio.pack_config import PackConfig


def test_a_codec_added_to_the_table_is_built_and_accepted(monkeypatch, tmp_path):
    built = []
    monkeypatch.setattr(registry, "AUDIO_CODECS",
                        (*registry.AUDIO_CODECS, AudioCodec("fake", lambda weights, device: built.append((weights, device)))))
    load_codec("fake", weights="w.pth", device="cuda")
    assert built == [("w.pth", "cuda")]
    assert PackConfig(src_dir=tmp_path, out_dir=tmp_path, codec="fake").codec == "fake"
    HeldOutConfig(checkpoints={"a": tmp_path}, sentences=[("1", "hi")], voice=tmp_path, reference=tmp_path,
                  out=tmp_path, codec="fake")
    with pytest.raises(ValueError, match="'wavenet'; choose one of: mel, dac, echo, fake"):
        PackConfig(src_dir=tmp_path, out_dir=tmp_path, codec="wavenet")


@pytest.mark.parametrize("command", ["pack", "judge"])
def test_the_cli_offers_the_table_names(command):
    from gossip_tts.cli.main import main

    option = next(p for p in main.commands[command].params if p.name == "codec")
    assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == codec_names()
