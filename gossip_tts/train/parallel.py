"""A torchrun group as one peer: the process group from torchrun's env vars, DDP or FSDP2.

A machine with N GPUs should be one strong peer, not N weak ones: `torchrun
--nproc_per_node=N -m gossip_tts peer` starts N ranks that train one replica with DDP or
FSDP2 (NCCL on CUDA, gloo on CPU), and only rank 0 talks to the swarm (peer/local/group.py).
As torchtitan does, every rank builds the whole model from the shared seed, then it is
wrapped; FSDP2 shards each DiT block and the root, so parameters and AdamW moments become
DTensors. `full_tensor`/`copy_full_into` are how gossip and checkpoints see such a
parameter whole.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import torch

    from gossip_tts.model.dit import EchoDiT

STRATEGIES = ("ddp", "fsdp2")
BACKENDS = ("auto", "nccl", "gloo")


@dataclass
class ParallelConfig:
    nproc: int = 1
    """Processes of this peer (one per GPU); above 1, `gossip-tts peer` starts itself under torchrun."""
    strategy: str = "ddp"
    """ddp (every rank holds the whole model) | fsdp2 (parameters and optimiser state sharded)."""
    backend: str = "auto"
    """auto (NCCL on CUDA, gloo on CPU) | nccl | gloo. gloo on CUDA lets ranks share a GPU (checks, tests)."""
    timeout_s: float = 3600.0
    """How long a rank waits in a collective (followers idle while rank 0 joins a swarm)."""
    verify_sync: bool = False
    """After every mix, check that every rank holds the same parameters (one gather; for tests)."""

    def __post_init__(self) -> None:
        if self.nproc < 1:
            raise ValueError(f"nproc must be >= 1, got {self.nproc}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True)
class Group:
    """This process's place in the group and the device it trains on."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: "torch.device"
    strategy: str


def torchrun_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) when started by torchrun with more than one process, else None."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    world = int(env["WORLD_SIZE"])
    if world <= 1:
        return None
    return int(env["RANK"]), world, int(env.get("LOCAL_RANK", env["RANK"]))


def is_follower(environ: Mapping[str, str] | None = None) -> bool:
    """A non-zero rank of a torchrun group: it trains but runs no network, checks or checkpoints."""
    env = torchrun_env(environ)
    return env is not None and env[0] != 0


def init_group(cfg: ParallelConfig, device_name: str) -> Group | None:
    """Join the process group torchrun describes (None outside torchrun or with one process)."""
    env = torchrun_env()
    if env is None:
        return None
    import torch
    import torch.distributed as dist

    from gossip_tts.device import resolve_device

    rank, world, local = env
    device = resolve_device(device_name)
    if device.type == "mps":
        raise ValueError("--nproc/torchrun: MPS has no collective backend; use --device cpu or one process")
    backend = cfg.backend if cfg.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    if backend == "nccl" and device.type != "cuda":
        raise ValueError("the nccl backend needs --device cuda")
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if local >= count and backend == "nccl":  # NCCL refuses two ranks on one GPU
            raise ValueError(f"rank {rank} wants GPU {local} but only {count} are visible; "
                             f"use --nproc {count} (or backend gloo to share GPUs)")
        device = torch.device("cuda", local % count)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=timedelta(seconds=cfg.timeout_s), **kwargs)
    return Group(rank, world, local, backend, device, cfg.strategy)


def rank_seed(seed: int, rank: int) -> int:
    """Rank 0 keeps the peer's seed (a one-rank group is the single process); others read their own order."""
    return seed if rank == 0 else (seed + 1_000_003 * rank) % (2**63)


def wrap_model(model: "EchoDiT", group: Group | None) -> "torch.nn.Module":
    """What the forward pass calls: the model, DDP around it, or the model sharded in place by FSDP2."""
    if group is None:
        return model
    if group.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        import inspect

        ids = [group.device.index] if group.device.type == "cuda" else None
        # Buffers (RoPE tables) are the same on every rank by construction: no per-step broadcast.
        newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
        no_sync = {"forward_sync_buffers": False} if newer else {"broadcast_buffers": False}
        return DistributedDataParallel(model, device_ids=ids, **no_sync)
    import warnings

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    # condition_kv returns head-split views that nothing modifies in place (test_parallel_train
    # checks the gradients against one process), so FSDP2's warning about views is noise here.
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(FSDPJointAttention\) returned a view")

    mesh = init_device_mesh(group.device.type, (group.world_size,))
    # One unit per block, gathered only while it runs (the model names them: `shard_units`).
    for unit, methods in model.shard_units():
        fully_shard(unit, mesh=mesh)
        for method in methods:
            register_fsdp_forward_method(unit, method)
    fully_shard(model, mesh=mesh)
    return model


def compile_problem(device: "torch.device") -> str | None:
    """Why torch.compile cannot work here (no Triton for CUDA, no C++ compiler for CPU), or None."""
    try:
        import torch._inductor  # noqa: F401
    except Exception as exc:  # a broken install raises many types
        return f"torch's inductor does not import ({exc})"
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "Triton is not installed"
    if device.type == "cpu" and not (shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")):
        return "no C++ compiler (g++ or c++) on PATH"
    return None


def full_tensor(t: "torch.Tensor") -> "torch.Tensor":
    """A whole tensor: a DTensor gathered from every rank (a collective), else itself."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def place_like(p: "torch.Tensor", full: "torch.Tensor") -> "torch.Tensor":
    """`full` laid out as `p`: this rank's shard for a DTensor (cut locally, no communication)."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(p, DTensor):
        value = full.to(p.device_mesh.device_type, p.dtype)
        return distribute_tensor(value, p.device_mesh, p.placements, src_data_rank=None)
    return full.to(p.device, p.dtype)


def add_full_into(p: "torch.Tensor", full: "torch.Tensor") -> None:
    """Add the whole value `full` to parameter `p` (plain or sharded), in place."""
    import torch
    from torch.distributed.tensor import DTensor

    with torch.no_grad():
        if isinstance(p, DTensor):
            p.to_local().add_(place_like(p, full.reshape(p.shape)).to_local())
        else:
            p.add_(full.reshape(p.shape).to(p.device, p.dtype))


def copy_full_into(p: "torch.Tensor", full: "torch.Tensor") -> None:
    """Overwrite parameter `p` (plain or sharded) with the whole value `full`."""
    import torch
    from torch.distributed.tensor import DTensor

    with torch.no_grad():
        if isinstance(p, DTensor):
            p.to_local().copy_(place_like(p, full.reshape(p.shape)).to_local())
        else:
            p.copy_(full.reshape(p.shape).to(p.device, p.dtype))
