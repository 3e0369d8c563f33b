"""Click options bound to a config dataclass field (`section.field`), with default=None.

The default shown by `--help` is read from the dataclass when help is rendered, so it is
never restated here, and a flag the user did not give reaches `settings.resolve` as None
and leaves the env var, the config file or the dataclass default in charge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from gossip_tts.settings import Key


class SettingOption(click.Option):
    """An option whose value is the config field `setting` ("train.batch_size")."""

    def __init__(self, *args: Any, setting: str, **kwargs: Any) -> None:
        section, _, field = setting.partition(".")
        self.key: Key = (section, field)
        kwargs.setdefault("default", None)
        super().__init__(*args, **kwargs)

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        try:
            shown = default_text(self.key, self.secondary_opts)
        except ImportError:  # a broken install must not break --help; `peer` itself will say what is missing
            shown = ""
        return (record[0], f"{record[1]}  [default: {shown}]".lstrip()) if shown else record


def default_text(key: Key, secondary_opts: list[str] | None = None) -> str:
    """How `--help` shows a field's default; "" where None/False/empty mean "off" (the help says so)."""
    from gossip_tts.settings import default_of

    value = default_of(key)
    if isinstance(value, bool):
        return ("on" if value else "off") if secondary_opts else ""
    if value is None or value == [] or value == ():
        return ""
    if isinstance(value, Path):
        return str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


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
