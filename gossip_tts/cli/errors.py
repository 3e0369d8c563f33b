"""The CLI's one boundary for errors a user can cause: each ends as one line, never a traceback.

A bad value (a ValueError from a config or a flag check, or one click refuses while parsing:
a mistyped option or command, a value that is not a number) is a usage error and exits 2; a
problem met while running (a damaged checkpoint, a taken port, tars that hold no latents,
a missing extra) exits 1. None prints click's usage banner: the line itself names the
problem and the flag or command that fixes it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Iterator, TypeVar

import click
from click.exceptions import NoArgsIsHelpError

T = TypeVar("T")
MAX_CHARS = 600
"""A message past this is cut: a torch shape mismatch can name hundreds of tensors."""


class SettingError(click.ClickException):
    """A bad setting: one line like any other error, with the usage exit status."""

    exit_code = 2


def one_line(message: str) -> str:
    """The message on one line (newlines and runs of spaces folded), cut at MAX_CHARS."""
    text = " ".join(message.split())
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1] + "…"


def fail_cleanly(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run `fn`; turn a user-facing error (bad value, missing file, damaged checkpoint, taken
    port, unusable data, missing extra) into one clear line and an exit status."""
    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:  # Ctrl+C outside the training loop (start-up, joining): no traceback
        click.echo("interrupted", err=True)
        sys.exit(130)
    except ValueError as exc:
        raise SettingError(one_line(str(exc) or type(exc).__name__)) from exc
    except _problems_met_while_running() as exc:
        raise click.ClickException(one_line(str(exc) or type(exc).__name__)) from exc


def _problems_met_while_running() -> tuple[type[BaseException], ...]:
    """Read only once an error other than a bad value is raised: their modules import torch, and
    a mistyped flag value (a ValueError) must be answered without waiting for it."""
    from gossip_tts.data.errors import EmptyStreamError
    from peer.local.checkpoint import CheckpointError

    return CheckpointError, EmptyStreamError, OSError, ImportError


class OneLineCommand(click.Command):
    """A command whose parsing errors (a mistyped option, a value that is not a number) are one
    line naming the help that lists what it takes, instead of click's usage banner."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with _usage_in_one_line(f"{_command_path(parent)} {info_name or self.name}".strip()):
            return super().make_context(info_name, args, parent, **extra)


class OneLineGroup(click.Group):
    """The CLI's group: its own parsing errors (a command that does not exist) are one line
    too, and its commands are `OneLineCommand`s."""

    command_class = OneLineCommand

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with _usage_in_one_line("gossip-tts"):
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _usage_in_one_line("gossip-tts"):  # resolving the command name happens in here
            return super().invoke(ctx)


@contextlib.contextmanager
def _usage_in_one_line(command: str) -> Iterator[None]:
    """Turn click's UsageError into one line ending with the help of `command` (or of the
    command click names, when it names one)."""
    try:
        yield
    except NoArgsIsHelpError:  # a bare `gossip-tts`: the help is the answer
        raise
    except click.UsageError as exc:
        command = _command_path(exc.ctx) if exc.ctx is not None and exc.ctx.parent is not None else command
        raise SettingError(one_line(f"{exc.format_message().rstrip('.')}; see '{command} --help'")) from exc


def _command_path(ctx: click.Context | None) -> str:
    """`gossip-tts` and the subcommands the user typed (however the CLI was started)."""
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["gossip-tts", *names])
