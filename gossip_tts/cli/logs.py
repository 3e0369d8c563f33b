"""Logging for the command line: timestamped lines on stderr, flushed one by one.

Every line goes through `logging` so that a peer piped to a file or a service manager shows
each line when it happens (a plain `print` to a pipe is block-buffered until exit), and so
that `--quiet` and `--log-json` apply to everything, including messages of library modules.
Results a script reads (`peer_id=...`, `eval_loss=...`, `--print-config`) stay on stdout.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, TextIO

from gossip_tts.cli.terminal_text import printable

LOGGER_NAME = "gossip_tts"
_MARK = "_gossip_tts_cli_handler"
_ORIGINAL_SHOWWARNING = warnings.showwarning


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (RFC 3339, UTC), level, logger, message. ASCII only: a
    message may quote a peer, and the file is read in terminals, so every other character is a
    JSON escape (it reads back the same)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        obj = {"time": stamp, "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        return json.dumps(obj)


def configure(quiet: bool = False, json_file: Path | None = None, stream: TextIO | None = None) -> None:
    """Send log records to `stream` (stderr) as `2026-01-01 12:00:00.123 message` lines.

    `quiet` keeps only warnings and errors on the stream; `json_file` additionally gets every
    record at INFO and above as a JSON line (appended, flushed per line). Calling it again
    replaces the handlers it added before (tests run several commands in one process).
    """
    root = logging.getLogger()
    reset()
    console = logging.StreamHandler(stream or sys.stderr)
    console.setFormatter(ConsoleFormatter())
    console.setLevel(logging.WARNING if quiet else logging.INFO)
    handlers: list[logging.Handler] = [console]
    if json_file is not None:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(json_file, mode="a", encoding="utf-8")
        to_file.setFormatter(JsonFormatter())
        to_file.setLevel(logging.INFO)
        handlers.append(to_file)
    for handler in handlers:
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    # Chatty third-party loggers stay at warnings even when ours are at INFO.
    for name in ("aiohttp.access", "zeroconf", "asyncio"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.showwarning = _warning_as_log_line


def _warning_as_log_line(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                         line: Any = None) -> None:
    """A Python warning (e.g. a key file readable by others) as one WARNING line like the rest,
    not the file, line number and source line that `warnings` prints by default."""
    logging.getLogger(LOGGER_NAME).warning("%s", message)


class ConsoleFormatter(logging.Formatter):
    """`2026-01-01 12:00:00.123 message` (local time); warnings and errors also name their level."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
        level = f"{record.levelname} " if record.levelno >= logging.WARNING else ""
        text = f"{stamp} {level}{printable(record.getMessage())}"  # a message may quote a peer
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def reset() -> None:
    """Remove the handlers `configure` added (tests invoke several commands in one process)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.WARNING)  # Python's default
    warnings.showwarning = _ORIGINAL_SHOWWARNING


def emitter(name: str = LOGGER_NAME) -> Callable[[str], None]:
    """An `emit(text)` for code that reports progress through a callable (peer/, apps)."""
    logger = logging.getLogger(name)
    return logger.info
