"""Settings layers (flag > env > file > default) over toy sections, errors naming what the user typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gossip_tts.cli import settings
from gossip_tts.cli.config_values import ValueProblem, coerce
from gossip_tts.cli.settings import Setting, SettingsError


@dataclass
class ToyTrain:
    batch_size: int = 16
    lr: float = 3e-4
    sources: list[str] = field(default_factory=list)
    threads: int | None = None
    betas: tuple[float, float] = (0.9, 0.95)

    def __post_init__(self) -> None:
        if self.batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {self.batch_size}")


@dataclass
class ToyNet:
    listen: str = "0.0.0.0:0"
    mdns: bool = True

    def __post_init__(self) -> None:
        if ":" not in self.listen:
            raise ValueError(f"peer address {self.listen!r} is not 'HOST:PORT'")


@dataclass
class ToyApp:
    train: ToyTrain = field(default_factory=ToyTrain)
    net: ToyNet = field(default_factory=ToyNet)
    solo: bool = False
    key_file: Path | None = None


@pytest.fixture(autouse=True)
def toy_sections(monkeypatch):
    monkeypatch.setattr(settings, "APP_CONFIG", f"{__name__}:ToyApp")


FLAGS = {("train", "batch_size"): "--batch-size", ("net", "listen"): "--listen"}


def test_coerce_env_strings_and_refuses_what_does_not_fit():
    assert coerce("8", int) == 8 and coerce("1e-3", float) == 0.001 and coerce(3, float) == 3.0
    assert coerce("off", bool) is False and coerce("YES", bool) is True
    assert coerce("a, b", list[str]) == ["a", "b"] and coerce(("x",), list[str]) == ["x"]
    assert coerce("", int | None) is None and coerce("none", Path | None) is None and coerce("4", int | None) == 4
    assert coerce([0.5, 0.9], tuple[float, float]) == (0.5, 0.9)
    for value, tp in (("eight", int), (True, int), ("maybe", bool), (1.5, int), ([1], tuple[float, float]), (3, str)):
        with pytest.raises(ValueProblem):
            coerce(value, tp)
    with pytest.raises(ValueProblem, match="cannot be set"):
        coerce("x", frozenset[bytes] | None)


def test_flag_beats_env_beats_file_beats_default(tmp_path):
    conf = tmp_path / "run.toml"
    conf.write_text('[train]\nbatch_size = 4\nlr = 0.01\nsources = ["a", "b"]\n[net]\nmdns = false\n')
    env = {"GOSSIP_TTS_TRAIN_BATCH_SIZE": "8", "GOSSIP_TTS_TRAIN_LR": "0.02", "GOSSIP_TTS_CACHE": "/elsewhere"}
    flags = {("train", "batch_size"): (32, "--batch-size"), ("train", "threads"): (None, "--threads"),
             ("train", "sources"): ((), "--data")}
    resolved = settings.resolve(flags, conf, env)
    assert resolved[("train", "batch_size")] == Setting(32, "--batch-size")
    assert resolved[("train", "lr")] == Setting(0.02, "GOSSIP_TTS_TRAIN_LR")
    assert resolved[("train", "sources")].value == ["a", "b"] and resolved[("net", "mdns")].value is False
    assert ("train", "threads") not in resolved  # a flag left at None restates nothing
    app = settings.build(resolved, FLAGS)
    assert (app.train.batch_size, app.train.lr, app.net.mdns, app.net.listen) == (32, 0.02, False, "0.0.0.0:0")
    assert app.solo is False and app.train.betas == (0.9, 0.95)  # defaults from the dataclasses


def test_unknown_keys_are_named(tmp_path):
    conf = tmp_path / "run.toml"
    conf.write_text("[train]\nbatchsize = 4\n")
    with pytest.raises(SettingsError, match=r"unknown setting 'batchsize' in \[train\]; known: batch_size, betas"):
        settings.resolve({}, conf, {})
    conf.write_text("[trian]\nbatch_size = 4\n")
    with pytest.raises(SettingsError, match=r"unknown section \[trian\]; known: peer, train, net"):
        settings.resolve({}, conf, {})
    with pytest.raises(SettingsError, match="GOSSIP_TTS_NET_LISTN: unknown setting 'listn'"):
        settings.resolve({}, None, {"GOSSIP_TTS_NET_LISTN": "x"})
    conf.write_text("[train]\nbatch_size = 'four'\n")
    with pytest.raises(SettingsError, match=r"run.toml \[train\] batch_size: expected an integer, got 'four'"):
        settings.resolve({}, conf, {})


@pytest.mark.parametrize("source, expected", [
    ("flag", "--batch-size must be > 0, got 0"),
    ("env", "GOSSIP_TTS_TRAIN_BATCH_SIZE must be > 0, got 0"),
    ("file", "[train] batch_size must be > 0, got 0"),
])
def test_dataclass_errors_name_where_the_value_came_from(tmp_path, source, expected):
    conf = tmp_path / "run.toml"
    conf.write_text("[train]\nbatch_size = 0\n")
    flags = {("train", "batch_size"): (0 if source == "flag" else None, "--batch-size")}
    env = {"GOSSIP_TTS_TRAIN_BATCH_SIZE": "0"} if source == "env" else {}
    resolved = settings.resolve(flags, conf if source == "file" else None, env)
    with pytest.raises(SettingsError) as info:
        settings.build(resolved, FLAGS)
    assert str(info.value).endswith(expected) and "batch_size must" not in str(info.value).replace("] batch_size", "")


def test_an_error_quoting_a_value_is_prefixed_with_its_flag():
    resolved = settings.resolve({("net", "listen"): ("nonsense", "--listen")}, None, {})
    with pytest.raises(SettingsError, match=r"^--listen: peer address 'nonsense' is not 'HOST:PORT'$"):
        settings.build(resolved, FLAGS)


def test_printed_config_reads_back_to_the_same_config(tmp_path):
    resolved = settings.resolve({("train", "batch_size"): (4, "--batch-size"), ("train", "sources"): (("d1", "d 2"), "--data")},
                                None, {"GOSSIP_TTS_NET_MDNS": "0"})
    app = settings.build(resolved, FLAGS)
    text = settings.to_toml(app, resolved)
    assert "batch_size = 4  # --batch-size" in text and "# key_file = (unset)" in text and "lr = 0.0003\n" in text
    conf = tmp_path / "printed.toml"
    conf.write_text(text)
    again = settings.build(settings.resolve({}, conf, {}), FLAGS)
    assert again == app


@dataclass
class ToyLoop:
    steps: int = 3


@dataclass
class ToyAppWithLoop(ToyApp):
    loop: ToyLoop = field(default_factory=ToyLoop)


def test_the_sections_are_the_app_configs_dataclass_fields_in_order(monkeypatch):
    assert settings.sections() == (("peer", ToyApp), ("train", ToyTrain), ("net", ToyNet))  # solo, key_file: [peer]
    monkeypatch.setattr(settings, "APP_CONFIG", f"{__name__}:ToyAppWithLoop")  # one field more, one section more
    assert settings.sections()[-1] == ("loop", ToyLoop)
    assert settings.build(settings.resolve({}, None, {"GOSSIP_TTS_LOOP_STEPS": "5"}), {}).loop.steps == 5


def test_the_real_sections_follow_peer_app_config():
    from gossip_tts.apps.peer_config import PeerAppConfig

    real = settings._sections_of("gossip_tts.apps.peer_config:PeerAppConfig")
    assert [name for name, _ in real] == ["peer", "train", "loop", "gossip", "net", "session", "parallel", "data",
                                          "swarm_data"]  # the order of docs/cli.md and --print-config
    app = PeerAppConfig()
    assert all(type(getattr(app, name)) is cls for name, cls in real[1:])
