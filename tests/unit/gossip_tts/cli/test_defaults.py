"""One option style: every flag of every command is a `ConfigOption` bound to a field of its
command's config dataclass (or a flag of the command alone), holds no default of its own,
shows its field's default in --help and leaves that default in charge when not given."""

from __future__ import annotations

import dataclasses

import click
import pytest
from click.testing import CliRunner

from gossip_tts.cli.main import main
from gossip_tts.cli.options import ConfigOption, Flags, field_default, load_config

COMMANDS = sorted(main.commands)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_flag_is_declared_in_the_one_style_with_no_default_of_its_own(name: str) -> None:
    for p in main.commands[name].params:
        if isinstance(p, click.Option) and p.name != "help":
            assert isinstance(p, ConfigOption), f"{name} {p.opts[0]} is not declared through gossip_tts.cli.options.Flags"
            unset = p.default is None or type(p.default).__name__ == "Sentinel"  # click's "no default"
            assert unset, f"{name} {p.opts[0]} restates the default {p.default!r}"


@pytest.mark.parametrize("name", COMMANDS)
def test_each_flag_names_a_real_field_and_shows_its_default(name: str) -> None:
    for p in main.commands[name].params:
        if isinstance(p, ConfigOption) and p.field is not None and p.config is not None:
            value = field_default(load_config(p.config), p.field)  # a KeyError names a field the config lacks
            if not p.required and value not in (None, False, (), []):
                assert p.default_shown() != "", (name, p.opts[0], value)


def test_a_declared_default_is_refused() -> None:
    with pytest.raises(TypeError, match="default"):
        Flags("gossip_tts.audio.pack_config:PackConfig").option("--shard-size", type=int, default=7)(lambda: None)


def test_a_command_without_a_config_has_only_flags_of_its_own() -> None:
    with pytest.raises(TypeError, match="field=None"):
        Flags(None).option("--out")(lambda: None)


def test_the_shown_defaults_are_the_dataclasses() -> None:
    shown = {(name, p.opts[0]): p.default_shown() for name in ("pack", "synthesize", "eval", "status", "simnet", "peer")
             for p in main.commands[name].params if isinstance(p, ConfigOption)}
    assert shown[("pack", "--shard-size")] == "256" and shown[("pack", "--codec")] == "mel"
    assert shown[("synthesize", "--steps")] == "32" and shown[("synthesize", "--truncation")] == ""
    assert shown[("eval", "--max-samples")] == "256" and shown[("status", "--timeout")] == "5"
    assert shown[("simnet", "--scenario")] == "stragglers" and shown[("simnet", "--plots")] == "on"
    assert shown[("peer", "--batch-size")] != "" and shown[("peer", "--quiet")] == ""


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
    assert [(c.max_samples, c.device, c.weights, c.sources) for c in built] == [(*expected, ["x"])]
    assert dataclasses.asdict(built[0])["batch_size"] == 16


def test_synthesize_passes_truncation_to_the_sampler(monkeypatch, tmp_path) -> None:
    import gossip_tts.apps.synth_app as synth_app

    built = []
    monkeypatch.setattr(synth_app, "run", built.append)
    args = ["synthesize", "--checkpoint", str(tmp_path), "--text", "hi", "--out", str(tmp_path / "o.wav")]
    assert CliRunner().invoke(main, [*args, "--truncation", "0.8"]).exit_code == 0
    assert CliRunner().invoke(main, args).exit_code == 0
    assert [c.truncation for c in built] == [0.8, None]
    assert built[0].sampler.truncation == 0.8


def test_simnet_plots_switch_reaches_the_config(monkeypatch) -> None:
    import simnet.runs.cli_app as cli_app

    built = []
    monkeypatch.setattr(cli_app, "run", lambda cfg: built.append(cfg) or {})
    assert CliRunner().invoke(main, ["simnet", "--no-plots", "--seed", "3"]).exit_code == 0
    assert CliRunner().invoke(main, ["simnet"]).exit_code == 0
    assert [(c.plots, c.seed, c.scenario) for c in built] == [(False, 3, "stragglers"), (True, 0, "stragglers")]


def test_the_named_choices_are_the_registries() -> None:
    """Codec, guidance and weights names come from the tables the code runs by, never a list here."""
    from gossip_tts.audio.registry import codec_names
    from gossip_tts.model.guidance import GUIDANCE_MODES
    from gossip_tts.train.weights import WEIGHTS

    choices = {(name, p.name): tuple(p.type.choices) for name in COMMANDS for p in main.commands[name].params
               if isinstance(p, click.Option) and isinstance(p.type, click.Choice)}
    assert choices[("synthesize", "guidance")] == GUIDANCE_MODES
    assert choices[("synthesize", "weights")] == choices[("eval", "weights")] == WEIGHTS
    assert choices[("pack", "codec")] == choices[("judge", "codec")] == tuple(codec_names())
