"""pack, synthesize and eval hold no default of their own: each flag's default is its config
dataclass's field default, shown by --help and left in charge when the flag is not given."""

from __future__ import annotations

import dataclasses
import importlib

import click
import pytest
from click.testing import CliRunner

from gossip_tts.cli.main import main
from gossip_tts.cli.options import FieldOption
from gossip_tts.cli.settings import field_default

COMMANDS = ("pack", "synthesize", "eval")


def _config(option: FieldOption) -> type:
    module, _, attr = option.config.partition(":")
    return getattr(importlib.import_module(module), attr)


def test_no_flag_of_these_commands_restates_a_default() -> None:
    for name in COMMANDS:
        for p in main.commands[name].params:
            if isinstance(p, click.Option) and not (p.is_flag or p.multiple or p.required):
                unset = p.default is None or type(p.default).__name__ == "Sentinel"  # click's "no default"
                assert unset, f"{name} {p.opts[0]} restates the default {p.default!r}"


def test_each_flag_shows_its_config_fields_default() -> None:
    seen = 0
    for name in COMMANDS:
        for p in main.commands[name].params:
            if isinstance(p, FieldOption):
                value = field_default(_config(p), p.name)
                assert p.default_shown() == ("" if value is None else str(value)), (name, p.opts[0])
                seen += value is not None
    assert seen == 13  # pack: codec, shard_size, device; synthesize: 7; eval: device, max_samples, weights


def test_help_follows_the_dataclass(monkeypatch) -> None:
    from gossip_tts.audio.pack_config import PackConfig

    assert "[default: 256]" in CliRunner().invoke(main, ["pack", "--help"]).output
    monkeypatch.setattr(PackConfig.__dataclass_fields__["shard_size"], "default", 512)
    assert "[default: 512]" in CliRunner().invoke(main, ["pack", "--help"]).output


@pytest.mark.parametrize("flags, expected", [([], (256, "cpu", "average")),
                                             (["--max-samples", "3", "--weights", "live"], (3, "cpu", "live"))])
def test_a_flag_not_given_leaves_the_dataclass_default(monkeypatch, tmp_path, flags, expected) -> None:
    import gossip_tts.apps.eval_app as eval_app

    built = []
    monkeypatch.setattr(eval_app, "run", built.append)
    result = CliRunner().invoke(main, ["eval", "--checkpoint", str(tmp_path), "--data", "x", *flags])
    assert result.exit_code == 0, result.output
    assert [(c.max_samples, c.device, c.weights) for c in built] == [expected]
    assert dataclasses.asdict(built[0])["batch_size"] == 16
