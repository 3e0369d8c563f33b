"""Settings of `gossip-tts peer`: every default lives once, in a typed config dataclass.

A value comes from, in order of precedence: a flag, an env var `GOSSIP_TTS_<SECTION>_<FIELD>`,
the `--config` TOML file (`[section]` tables, `field = value`), or the dataclass default.
Flags are declared with default=None, so a flag the user did not give neither restates nor
overrides a default. The sections are the app config's dataclass fields (`sections`): adding
a component is one field of `PeerAppConfig`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from gossip_tts.cli.config_values import ValueProblem, coerce, render_toml
from gossip_tts.cli.options import field_default

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

APP_SECTION = "peer"
APP_CONFIG = "gossip_tts.apps.peer_config:PeerAppConfig"
"""The app config ("module:Class"), imported when first needed: its own fields are the
[peer] section, and each field that is a dataclass is a section of that name."""
ENV_PREFIX = "GOSSIP_TTS_"
Key = tuple[str, str]


class SettingsError(ValueError):
    """A value the user gave (flag, env var or file) is unknown or wrong; the text says which."""


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str
    """Where the value came from: "--batch-size", "GOSSIP_TTS_TRAIN_BATCH_SIZE", "run.toml"."""


def sections() -> tuple[tuple[str, type], ...]:
    """(name, config class) of every section, the app's first, then its fields' in their order."""
    return _sections_of(APP_CONFIG)


@functools.cache
def _sections_of(app_config: str) -> tuple[tuple[str, type], ...]:
    module, _, attr = app_config.partition(":")
    app = getattr(importlib.import_module(module), attr)
    hints = typing.get_type_hints(app)
    return ((APP_SECTION, app),) + tuple((f.name, hints[f.name]) for f in dataclasses.fields(app)
                                         if f.init and dataclasses.is_dataclass(hints[f.name]))


def section_class(name: str) -> type:
    return dict(sections())[name]


def section_fields(name: str) -> dict[str, Any]:
    """{field: type} of a section: its init fields that hold a value. A field that is itself a config
    dataclass is a section of its own (the app config's) or a part of its section's component that
    keeps its defaults here (`SessionConfig.partners`)."""
    cls = section_class(name)
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init and not dataclasses.is_dataclass(hints[f.name])}


def key_of(path: str) -> Key:
    """The (section, field) of a flag's `field`: "train.batch_size", or "solo" of the app's own."""
    section, _, field = path.rpartition(".")
    return (section or APP_SECTION, field)


def default_of(key: Key) -> Any:
    """The dataclass default of one field (what `--help` shows)."""
    return field_default(section_class(key[0]), key[1])


def _typed(key: Key, raw: Any, source: str) -> Setting:
    fields = section_fields(key[0])
    if key[1] not in fields:
        known = ", ".join(sorted(fields))
        raise SettingsError(f"{source}: unknown setting {key[1]!r} in [{key[0]}]; known: {known}")
    try:
        return Setting(coerce(raw, fields[key[1]]), source)
    except ValueProblem as exc:
        raise SettingsError(f"{source}: {exc}") from None


def from_file(path: Path) -> dict[Key, Setting]:
    """`[section] field = value` tables of a TOML file; unknown sections and keys are errors."""
    try:
        data = tomllib.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise SettingsError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"--config {path}: not valid TOML: {exc}") from None
    out: dict[Key, Setting] = {}
    names = [n for n, _ in sections()]
    for section, table in data.items():
        if section not in names or not isinstance(table, dict):
            raise SettingsError(f"--config {path}: unknown section [{section}]; known: {', '.join(names)}")
        for field, raw in table.items():
            out[(section, field)] = _typed((section, field), raw, f"{path} [{section}] {field}")
    return out


def from_env(environ: Mapping[str, str]) -> dict[Key, Setting]:
    """`GOSSIP_TTS_<SECTION>_<FIELD>` variables. Names of other sections (GOSSIP_TTS_CACHE) are not ours."""
    out: dict[Key, Setting] = {}
    for var, raw in sorted(environ.items()):
        for section, _ in sections():
            prefix = f"{ENV_PREFIX}{section.upper()}_"
            if var.startswith(prefix):
                out[(section, var[len(prefix):].lower())] = _typed((section, var[len(prefix):].lower()), raw, var)
    return out


def from_flags(flags: Mapping[Key, tuple[Any, str]]) -> dict[Key, Setting]:
    """Flag values the user gave ({key: (value, flag)}; None and empty tuples mean "not given")."""
    return {key: _typed(key, value, flag) for key, (value, flag) in flags.items() if value not in (None, ())}


def resolve(flags: Mapping[Key, tuple[Any, str]], config: Path | None = None,
            environ: Mapping[str, str] | None = None) -> dict[Key, Setting]:
    """Every value the user set, the highest-precedence source winning: flag > env > file."""
    layers = [from_file(config) if config else {}, from_env(os.environ if environ is None else environ), from_flags(flags)]
    merged: dict[Key, Setting] = {}
    for layer in layers:
        merged.update(layer)
    return merged


CHECKED_FIRST = ("net",)
"""Sections built (so checked) before the others: their checks import nothing heavy, and their
flags (--listen, --peer) are typed by hand; the gossip section's checks import torch, which
takes seconds, and a typo should be answered as fast as `--help`."""


def build(settings: Mapping[Key, Setting], flag_names: Mapping[Key, str]) -> Any:
    """The app config; a dataclass's complaint is reworded to name the flag, variable or file."""
    built: dict[str, Any] = {}
    rest = [n for n, _ in sections() if n not in (APP_SECTION, *CHECKED_FIRST)]
    order = [*CHECKED_FIRST, *rest, APP_SECTION]  # the app receives the others
    for section in order:
        values = {f: s for (sec, f), s in settings.items() if sec == section}
        kwargs = {f: s.value for f, s in values.items()}
        if section == APP_SECTION:
            kwargs.update({name: obj for name, obj in built.items()})
        try:
            built[section] = section_class(section)(**kwargs)
        except ValueError as exc:
            raise SettingsError(explain(str(exc), section, settings, flag_names)) from None
    return built[APP_SECTION]


def display_name(key: Key, settings: Mapping[Key, Setting], flag_names: Mapping[Key, str]) -> str:
    """What to call a field in a message: where its value came from, else its flag, else [section] field."""
    if key in settings:
        return settings[key].source
    return flag_names.get(key) or f"[{key[0]}] {key[1]}"


def explain(message: str, section: str, settings: Mapping[Key, Setting], flag_names: Mapping[Key, str]) -> str:
    """Replace field names in a dataclass error with what the user knows them by.

    A message naming no field (e.g. "peer address 'x' is not 'HOST:PORT'") is prefixed with the
    setting whose value it quotes."""
    fields = sorted(section_fields(section), key=len, reverse=True)
    named = False
    for field in fields:
        pattern = re.compile(rf"(?<![\w\-\[]){re.escape(field)}(?![\w\-])")
        if pattern.search(message):
            named = True
            message = pattern.sub(lambda _m, f=field: display_name((section, f), settings, flag_names), message)
    if not named:
        for (sec, field), setting in settings.items():
            values = setting.value if isinstance(setting.value, (list, tuple)) else [setting.value]
            if sec == section and any(repr(v) in message or repr(str(v)) in message for v in values if v is not None):
                return f"{setting.source}: {message}"
    return message


def effective(settings: Mapping[Key, Setting], key: Key) -> Any:
    """The value of one field: set by the user, else the dataclass default."""
    return settings[key].value if key in settings else default_of(key)


def to_toml(app: Any, settings: Mapping[Key, Setting]) -> str:
    """The resolved configuration as a TOML file that `--config` reads back unchanged."""
    tables: dict[str, dict[str, tuple[Any, str]]] = {}
    for section, _ in sections():
        obj = app if section == APP_SECTION else getattr(app, section)
        tables[section] = {
            field: (getattr(obj, field), settings[(section, field)].source if (section, field) in settings else "")
            for field in section_fields(section)
        }
    header = "gossip-tts peer: resolved configuration (flag > GOSSIP_TTS_<SECTION>_<FIELD> > --config file > default).\n" \
             "A comment after a value names where it came from; values without one are defaults."
    return render_toml(tables, header)
