"""The CLI's one boundary for errors a user can cause: each ends as one line, never a traceback.

A bad value (a ValueError from a config or a flag check) is a usage error and exits 2; a
problem met while running (a damaged checkpoint, a taken port, tars that hold no latents,
a missing extra) exits 1. Neither prints click's usage banner: the line itself names the
problem and the flag or command that fixes it.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

import click

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
    from gossip_tts.data.errors import EmptyStreamError
    from peer.local.checkpoint import CheckpointError

    try:
        return fn(*args, **kwargs)
    except KeyboardInterrupt:  # Ctrl+C outside the training loop (start-up, joining): no traceback
        click.echo("interrupted", err=True)
        sys.exit(130)
    except ValueError as exc:
        raise SettingError(one_line(str(exc) or type(exc).__name__)) from exc
    except (CheckpointError, EmptyStreamError, OSError, ImportError) as exc:
        raise click.ClickException(one_line(str(exc) or type(exc).__name__)) from exc
