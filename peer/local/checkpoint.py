"""Checkpoints in safetensors, written atomically so a crash never leaves a broken one.

The newest checkpoint is `<dir>/checkpoint.safetensors`: a new one is written to a
temporary file, fsynced, then renamed over it (rename is atomic on POSIX), so a crash
mid-write leaves the previous file intact. The previous `keep - 1` are kept as
`checkpoint.1.safetensors`, `checkpoint.2...` (newest first). Metadata (step, config, ...)
rides in the safetensors header as one JSON string, with a BLAKE2b digest of every tensor
and the metadata; nothing is pickled. A checkpoint whose tensors are not finite is never
written, and `load_newest_good` skips (and names) any that is unreadable, altered or not
finite, so `--resume` takes the newest good one.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from peer.local.tensor_file import byte_view, write_safetensors
from protocol.finite import all_finite

CHECKPOINT_NAME = "checkpoint.safetensors"
AVERAGE_PREFIX = "average."
"""Checkpoint tensors `average.<parameter name>`: a peer's averaged weights (peer.core.average),
which synthesis prefers to the live ones."""
KEEP = 3
"""Checkpoints kept: the newest and the ones before it, for when the newest is bad."""
_META_KEY = "gossip_tts_meta"
_DIGEST_KEY = "gossip_tts_digest"


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, or not one of ours."""


def checkpoint_path(directory: str | Path, age: int = 0) -> Path:
    """The newest checkpoint (age 0) or an older one kept beside it."""
    return Path(directory) / (CHECKPOINT_NAME if age == 0 else f"checkpoint.{age}.safetensors")


def digest(tensors: dict[str, torch.Tensor], meta_json: str) -> str:
    """BLAKE2b over every tensor (name, dtype, shape, bytes) and the metadata."""
    h = hashlib.blake2b(meta_json.encode(), digest_size=32, person=b"gossip-tts/ckpt")
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        if t.numel():
            h.update(memoryview(byte_view(t.contiguous())))  # read in place: no copy of the tensor
    return h.hexdigest()


def non_finite(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Names of floating tensors holding NaN or ±inf (tested a piece at a time, no mask the size
    of a tensor)."""
    return [k for k, t in tensors.items() if t.is_floating_point() and not all_finite(t)]


def save_checkpoint(directory: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any],
                    keep: int = KEEP) -> Path:
    """Write tensors + meta to `<directory>/checkpoint.safetensors` atomically, keeping older ones.

    Raises CheckpointError (writing nothing) when a tensor is not finite: a poisoned state
    must never replace a good one.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory)
    tmp = directory / f".{CHECKPOINT_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
    contiguous = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    bad = non_finite(contiguous)
    if bad:
        raise CheckpointError(f"refusing to save a checkpoint with non-finite values in {bad[:3]}")
    meta_json = json.dumps(meta, sort_keys=True)
    metadata = {_META_KEY: meta_json, _DIGEST_KEY: digest(contiguous, meta_json)}
    try:
        with open(tmp, "wb") as f:
            write_safetensors(f, contiguous, metadata)  # from the tensors' memory: no copy of the state
            f.flush()
            os.fsync(f.fileno())
        for age in range(keep - 1, 0, -1):  # shift older ones down; each rename is atomic
            older = checkpoint_path(directory, age - 1)
            if older.exists():
                os.replace(older, checkpoint_path(directory, age))
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
    if _DIGEST_KEY in header and digest(tensors, header[_META_KEY]) != header[_DIGEST_KEY]:
        raise CheckpointError(f"checkpoint {path} does not match its digest: it was altered or damaged")
    bad = non_finite(tensors)
    if bad:
        raise CheckpointError(f"checkpoint {path} holds non-finite values in {bad[:3]}")
    return tensors, json.loads(header[_META_KEY])


def load_newest_good(directory: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], Path, list[str]]:
    """The newest checkpoint in `directory` that loads, matches its digest and is finite.

    Returns (tensors, meta, its path, why each newer one was skipped). Raises CheckpointError
    naming every reason when none is good, and when there is none at all.
    """
    skipped: list[str] = []
    for age in range(0, 64):
        path = checkpoint_path(directory, age)
        if not path.exists():
            if age >= KEEP:
                break
            continue
        try:
            tensors, meta = load_checkpoint(path)
        except CheckpointError as exc:
            skipped.append(str(exc))
            continue
        return tensors, meta, path, skipped
    raise CheckpointError("; ".join(skipped) or f"no checkpoint in {directory}")


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
