"""`gossip-tts peer` as a torchrun group: launching it, rank 0's set-up, the other ranks' loop.

`gossip-tts peer --nproc N` re-runs itself under torchrun (`--standalone`: one machine, a
free port on localhost). Each rank runs `gossip-tts peer` again; rank 0 does everything a
single peer does and drives the group through `peer.local.group.GroupTrainer`, the others build
the same trainer and follow (`peer.local.group.follow`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Sequence

if TYPE_CHECKING:
    from gossip_tts.train.parallel import Group


def torchrun_argv(nproc: int, argv: Sequence[str]) -> list[str]:
    """The command that runs `gossip-tts <argv>` as `nproc` ranks on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "gossip_tts", "--", *argv]  # "--": torchrun would read --nproc as its own --nproc-per-node


def launch(nproc: int, argv: Sequence[str], emit: Callable[[str], None]) -> None:
    """Replace this process with torchrun (signals and the exit status are then torchrun's)."""
    cmd = torchrun_argv(nproc, argv)
    emit(f"starting {nproc} processes under torchrun: {' '.join(cmd[1:])}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)


def shared_train_config(group: "Group", train_cfg: Any) -> Any:
    """`train_cfg` with rank 0's data-order seed (derived from its key) and sources, on every rank."""
    from dataclasses import replace

    import torch.distributed as dist

    box = [(train_cfg.seed, list(train_cfg.sources))] if group.rank == 0 else [None]
    dist.broadcast_object_list(box, src=0, device=group.device)
    seed, sources = box[0]
    return replace(train_cfg, seed=seed, sources=sources)


def comm_for(group: "Group") -> Any:
    from peer.local.group import GroupComm

    return GroupComm(group.device)


def run_follower(cfg: Any) -> int:
    """A non-zero rank (`gossip_tts.cli.peer` tells): join the group, build the same trainer
    (own data order) and follow rank 0's commands; the steps taken. Ctrl+C and SIGTERM are
    rank 0's to handle (it finishes the step, checkpoints, then releases the group)."""
    from gossip_tts.train.parallel import init_group
    from gossip_tts.train.trainer import TTSTrainer
    from peer.local.group import follow

    group = init_group(cfg.parallel, cfg.train.device)
    if group is None:
        raise RuntimeError("run_follower runs a non-zero rank of a torchrun group; this process is not in one")
    if threading_is_main():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    trainer = TTSTrainer(shared_train_config(group, cfg.train), group=group, data=cfg.data)
    try:
        return follow(trainer, comm_for(group), verify=cfg.parallel.verify_sync)
    finally:
        trainer.close()
        close_group()


def threading_is_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def close_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def leave(status: int = 0) -> NoReturn:
    """End a group rank's process after a run that closed everything: flush, then `os._exit`.

    Every rank has by then closed its trainer (rank 0 also its network and checkpoint) and
    destroyed the process group; what is left is interpreter teardown, which has nothing to
    save and is where torch.distributed can take a finished rank down: C++ threads (gloo's
    workers) that touch Python objects while the interpreter is being torn down abort the
    process ("terminate called without an active exception", SIGABRT), and torchrun then
    reports the whole group as failed. Skipping teardown leaves no window for that.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said there
            pass
    os._exit(status)
