"""Click options bound to a config dataclass field, with default=None.

The default shown by `--help` is read from the dataclass when help is rendered, so it is
never restated here, and a flag the user did not give reaches the config as None and
leaves its default in charge: `peer`'s (`SettingOption`, a `section.field` of the settings)
through `settings.resolve`, then the env var, the config file or the dataclass default;
the other commands' (`FieldOption`, a field of the command's one config) through `given`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable

import click

from gossip_tts.cli.settings import Key


class _ShowsDefault(click.Option):
    """Appends `[default: ...]` to its help as `default_shown` says, read when help is rendered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("default", None)
        super().__init__(*args, **kwargs)

    def default_shown(self) -> str:
        raise NotImplementedError

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        try:
            shown = self.default_shown()
        except ImportError:  # a broken install must not break --help; the command itself will say what is missing
            shown = ""
        return (record[0], f"{record[1]}  [default: {shown}]".lstrip()) if shown else record


class SettingOption(_ShowsDefault):
    """An option whose value is the config field `setting` ("train.batch_size")."""

    def __init__(self, *args: Any, setting: str, **kwargs: Any) -> None:
        section, _, field = setting.partition(".")
        self.key: Key = (section, field)
        super().__init__(*args, **kwargs)

    def default_shown(self) -> str:
        return default_text(self.key, self.secondary_opts)


class FieldOption(_ShowsDefault):
    """An option whose value is the field of its name in `config` ("module:Class"), the one
    config of a command other than `peer`; that module must import no torch (`--help` reads it)."""

    def __init__(self, *args: Any, config: str, **kwargs: Any) -> None:
        self.config = config
        super().__init__(*args, **kwargs)

    def default_shown(self) -> str:
        """As click shows a default (`str`), so these commands' help reads as before."""
        from gossip_tts.cli.settings import field_default

        module, _, attr = self.config.partition(":")
        value = field_default(getattr(importlib.import_module(module), attr), str(self.name))
        return "" if value is None or isinstance(value, bool) else str(value)


def given(**values: Any) -> dict[str, Any]:
    """The values of the flags the user gave: a FieldOption not given is None and leaves its
    field's default in charge."""
    return {name: value for name, value in values.items() if value is not None}


def default_text(key: Key, secondary_opts: list[str] | None = None) -> str:
    """How `--help` shows a field's default; "" where None/False/empty mean "off" (the help says so)."""
    from gossip_tts.cli.settings import default_of

    value = default_of(key)
    if isinstance(value, bool):
        return ("on" if value else "off") if secondary_opts else ""
    if value is None or value == [] or value == ():
        return ""
    if isinstance(value, Path):
        return str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def field_option(*decls: str, config: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`@field_option("--shard-size", config=PACK, type=int)`: a flag for one field of a command's config."""
    return click.option(*decls, cls=FieldOption, config=config, **kwargs)


def setting(*decls: str, setting: str, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`@setting("--batch-size", setting="train.batch_size", type=int)`: a flag for one config field."""
    return click.option(*decls, cls=SettingOption, setting=setting, **kwargs)


def user_flags(ctx: click.Context) -> dict[Key, tuple[Any, str]]:
    """{(section, field): (value, flag)} for every SettingOption of the invoked command."""
    out: dict[Key, tuple[Any, str]] = {}
    for param in ctx.command.params:
        if isinstance(param, SettingOption) and param.name is not None:
            value = ctx.params.get(param.name)
            flag = param.opts[0] if value is not False or not param.secondary_opts else param.secondary_opts[0]
            out[param.key] = (value, flag)
    return out


def flag_names(command: click.Command) -> dict[Key, str]:
    """{(section, field): "--flag"}: how errors name a field that has a flag."""
    return {p.key: p.opts[0] for p in command.params if isinstance(p, SettingOption)}
