"""Checks `gossip-tts peer` makes before any slow work (corpus, model), and where checkpoints go.

A wrong `--device`, a checkpoint of another preset or a checkpoint folder another peer is
using should fail in the first second with the flag to change, not after the corpus is
built and the model allocated.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import Any, Callable, Mapping

from gossip_tts.cli.settings import Key, Setting, effective

CHECKPOINT_DIR: Key = ("loop", "checkpoint_dir")
RUNS_ROOT = Path("runs")
DEFAULT_DIR_SOURCE = "default: runs/<swarm>"


def with_checkpoint_dir(settings: Mapping[Key, Setting]) -> dict[Key, Setting]:
    """Checkpoints go to `runs/<swarm>/` unless a checkpoint dir was given (`none` turns them off).

    Saved by default because a peer is meant to run for hours: losing them to a forgotten
    flag costs more than a folder in the working directory. The folder also keeps peer.key,
    so the peer id survives restarts."""
    out = dict(settings)
    if CHECKPOINT_DIR not in out:
        swarm = effective(settings, ("gossip", "swarm"))
        out[CHECKPOINT_DIR] = Setting(RUNS_ROOT / str(swarm), DEFAULT_DIR_SOURCE)
    return out


def check_device(name: str) -> None:
    """Fail now (ValueError naming --device) when the device is not usable here."""
    from gossip_tts.device import resolve_device

    resolve_device(name)


def check_listen(listen: str) -> None:
    """Fail now (OSError naming --listen) when the port is taken, not after the model is built.

    Bound with SO_REUSEADDR, as the server binds: a port in TIME_WAIT passes, one held by a
    listening socket does not. Port 0 always passes (the OS picks a free one)."""
    from peer.core.addresses import parse_address
    from peer.net.errors import listen_failure

    host, port = parse_address(listen, listener=True)
    if port == 0:
        return
    host = host.strip("[]")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise listen_failure(listen, exc) from None


def checkpoint_meta(path: Path) -> dict[str, Any] | None:
    """The gossip-tts metadata of a safetensors checkpoint, read from its header only.

    The header is 8 bytes of little-endian length then JSON (the safetensors format), so
    this reads a few KB however large the checkpoint is, and needs no torch."""
    try:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(min(size, 100 << 20)))
    except (OSError, ValueError, struct.error):
        return None
    for text in (header.get("__metadata__") or {}).values():
        try:
            meta = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(meta, dict) and "step" in meta:
            return meta
    return None


def check_checkpoint(directory: Path | None, resume: bool, preset: str, overwrite: bool = False) -> str | None:
    """A checkpoint to resume must be of this preset, and a folder that holds a run is started
    over only when `--overwrite` says so (given or default folder alike: a restart that forgot
    `--resume` must not rotate a long run away). Returns the line to say when it is started over."""
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other; pass --resume to continue the run "
                         "or --overwrite to start it over")
    if directory is None:
        return None
    from peer.local.checkpoint import checkpoint_path

    path = checkpoint_path(directory)
    if not path.exists():
        return None
    meta = checkpoint_meta(path) or {}
    theirs = (meta.get("train_config") or {}).get("preset")
    step = meta.get("step", "?")
    if resume and theirs and theirs != preset:
        raise ValueError(f"this checkpoint is preset {theirs}; pass --preset {theirs} "
                         f"(or another --checkpoint-dir to start a {preset} run)")
    if resume:
        return None
    if not overwrite:
        raise ValueError(f"{directory} already holds a checkpoint (step {step}, preset {theirs or '?'}); "
                         "pass --resume to continue it, --overwrite to start over in it, "
                         "or --checkpoint-dir DIR to start another run")
    return (f"--overwrite: starting over in {directory} (its checkpoint of step {step} is replaced "
            "at this run's first save)")


class DirectoryLock:
    """An exclusive lock on a checkpoint folder for the life of the process (two peers must
    not share a checkpoint or a peer.key). Released by the OS when the process dies."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / ".lock"
        self._file: Any = None

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; go without
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            self._file = None
            raise ValueError(f"{self.path.parent} is in use by another gossip-tts peer on this machine; "
                             "give this one its own --checkpoint-dir") from None

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def prepare_data(cfg: Any, emit: Callable[[str], None]) -> Any:
    """`cfg` with the built-in corpus resolved as its sources when it names none (built, with a
    line saying so, only the first time)."""
    if cfg.train.sources:
        return cfg
    from gossip_tts.apps.peer_app import default_sources

    return cfg.with_train(sources=default_sources(cfg.cache_dir, emit))
