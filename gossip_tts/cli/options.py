"""The CLI's one way to declare a flag: `Flags(config).option(...)`, bound to a config field.

Every flag of every command is a `ConfigOption` with default=None. Its `field` names a field of
its command's config dataclass ("module:Class"; `train.batch_size` walks into a field that is a
dataclass); `--help` shows that field's default, read when help is rendered, so no default is
restated here, and a flag the user did not give reaches the config as not given and leaves the
default in charge (`given`; `peer`'s through `settings.resolve`, then the env var, the config
file or the dataclass default). A flag of the command alone (`--quiet`, `--print-config`) has
field None and no default at all. A config module must import no torch: `--help` reads it.
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path
from typing import Any, Callable, Sequence

import click

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
_NAME = "same as the flag"
"""The `field` of a flag not given one: its parameter name (`--shard-size` is `shard_size`)."""


def load_config(config: str) -> type:
    """The dataclass `config` names ("module:Class")."""
    module, _, attr = config.partition(":")
    return getattr(importlib.import_module(module), attr)


def field_default(cls: type, path: str) -> Any:
    """The default of field `path` of dataclass `cls` ("train.batch_size" walks into the field
    `train`); None where it has none."""
    *outer, name = path.split(".")
    for part in outer:
        cls = typing.get_type_hints(cls)[part]
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def shown(value: Any, switch: bool = False) -> str:
    """How `--help` and docs/cli.md show a default; "" where None/False/empty mean "off" (the
    help says so). A boolean shows as on/off only for a `--x/--no-x` switch."""
    if isinstance(value, bool):
        return ("on" if value else "off") if switch else ""
    if value is None or value == [] or value == ():
        return ""
    if isinstance(value, Path):
        return str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


class ConfigOption(click.Option):
    """A flag whose value is the field `field` of the dataclass `config`, or, with field None, a
    flag of the command alone. It restates no default: passing one is a programming error."""

    def __init__(self, decls: Sequence[str], *, config: str | None, field: str | None = _NAME, **kwargs: Any) -> None:
        if "default" in kwargs:
            raise TypeError(f"{decls}: a flag takes its default from its config field, never its own")
        super().__init__(decls, default=None, **kwargs)
        self.config = config
        self.field: str | None = self.name if field == _NAME else field
        if self.field is not None and config is None:
            raise TypeError(f"{decls}: a command without a config has flags of its own only (field=None)")

    def default_shown(self) -> str:
        """The config field's default as `--help` shows it ("" for a required flag or none)."""
        if self.field is None or self.config is None or self.required:
            return ""
        try:
            value = field_default(load_config(self.config), self.field)
        except ImportError:  # a broken install must not break --help; the command itself will say what is missing
            return ""
        return shown(value, bool(self.secondary_opts))

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        default = self.default_shown()
        return (record[0], f"{record[1]}  [default: {default}]".lstrip()) if default else record


class Flags:
    """The flags of one command, each bound to a field of its config `config` ("module:Class";
    None for a command whose flags are its own, such as `keygen`)."""

    def __init__(self, config: str | None) -> None:
        self.config = config

    def option(self, *decls: str, **kwargs: Any) -> Decorator:
        """`@SYNTH.option("--steps", type=int)`: a flag for the field `steps`; `field="train.lr"`
        names another, `field=None` makes a flag of the command alone."""
        return click.option(*decls, cls=ConfigOption, config=self.config, **kwargs)


def config_options(command: click.Command) -> list[ConfigOption]:
    """The command's flags that set a config field."""
    return [p for p in command.params if isinstance(p, ConfigOption) and p.field is not None]


def given(ctx: click.Context) -> dict[str, Any]:
    """{field: value} of the config fields whose flags the user gave: a flag not given is None
    (an empty tuple where it repeats) and leaves its field's default in charge."""
    return {p.field: ctx.params[str(p.name)] for p in config_options(ctx.command)
            if ctx.params.get(str(p.name)) not in (None, ())}
