"""Running a few gloo ranks of the TTS trainer in spawned processes, on 127.0.0.1 only."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Callable

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_env(rank: int, world: int, port: int) -> None:
    """What torchrun would set, plus gloo bound to the loopback interface."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    if Path("/sys/class/net/lo").exists():
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


def _entry(rank: int, fn: Callable[..., Any], world: int, port: int, args: tuple) -> None:
    group_env(rank, world, port)
    torch.set_num_threads(1)
    try:
        fn(rank, *args)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable[..., Any], world: int, *args: Any) -> None:
    """Run fn(rank, *args) on `world` ranks; raises if any rank fails. `fn` must be importable."""
    mp.spawn(_entry, args=(fn, world, free_port(), args), nprocs=world, join=True)
