"""Checkpoints in safetensors, written atomically so a crash never leaves a broken one.

The newest good checkpoint is always `<dir>/checkpoint.safetensors`: a new one is written
to a temporary file, fsynced, then renamed over it (rename is atomic on POSIX), so a crash
mid-write leaves the previous file intact. Metadata (step, config, ...) rides in the
safetensors header as one JSON string; nothing is pickled.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

CHECKPOINT_NAME = "checkpoint.safetensors"
_META_KEY = "gossip_tts_meta"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, or not one of ours."""


def checkpoint_path(directory: str | Path) -> Path:
    return Path(directory) / CHECKPOINT_NAME


def save_checkpoint(directory: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> Path:
    """Write tensors + meta to `<directory>/checkpoint.safetensors` atomically."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory)
    tmp = directory / f".{CHECKPOINT_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
    contiguous = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    data = save(contiguous, metadata={_META_KEY: json.dumps(meta, sort_keys=True)})
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(directory)
    return final


def load_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read a checkpoint file (or the checkpoint inside a directory)."""
    path = Path(path)
    if path.is_dir():
        path = checkpoint_path(path)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
    except Exception as exc:  # safetensors raises several types for a damaged file
        raise CheckpointError(f"checkpoint {path} is unreadable: {exc}") from exc
    if _META_KEY not in header:
        raise CheckpointError(f"{path} is a safetensors file but not a gossip-tts checkpoint")
    return tensors, json.loads(header[_META_KEY])


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class BackgroundCheckpointer:
    """Writes snapshots taken at a step boundary in a thread, so training never waits on disk.

    At most one write runs at a time; a snapshot offered while one is still being written
    replaces any snapshot already waiting (only the newest matters).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._pending: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None
        self._thread: threading.Thread | None = None
        self.written = 0
        self.last_error: Exception | None = None

    def submit(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        with self._lock:
            self._pending = (tensors, meta)
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="checkpoint-writer", daemon=True)
                self._thread.start()

    def _drain(self) -> None:
        while True:
            with self._lock:
                job, self._pending = self._pending, None
                if job is None:
                    self._thread = None  # under the lock, so submit() starts a fresh writer
                    return
            try:
                save_checkpoint(self.directory, *job)
                self.written += 1
            except Exception as exc:  # disk full, permissions: report, keep training
                self.last_error = exc

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every submitted snapshot is on disk."""
        while True:
            with self._lock:
                thread = self._thread
            if thread is None:
                return
            thread.join(timeout)
            if timeout is not None:
                return
