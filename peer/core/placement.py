"""Where a node holds its copies: beside the parameters on the trainer's GPU, within a memory
budget, or in CPU memory.

The node's arithmetic (x − x̂, top-k, adding updates into the copies, the mix's consensus step, the
averaged weights) is a few passes over the model per publish. On the CPU each pass costs a core
its memory bandwidth for every parameter; on the GPU that holds the parameters it is a small share
of a training step, and only the kept entries cross to the CPU for the index code, lz4 and the
signature (`protocol.topk_device`). What it costs there is GPU memory, which training wants too:
`GossipConfig.device_budget_gib` says how much the node may take, and the budget decides how many
neighbour copies it holds. All of a node's copies live on one device, so the mix reads them where
it adds into the parameters; a budget too small for a useful number of neighbours keeps the node
on the CPU, as it is on a CPU peer. Only CUDA: the copies' norms fall back to float64 where float32
overflows, which Apple's MPS does not have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from peer.core.gossip_config import GossipConfig

__all__ = ["Placement", "place_node", "MIN_DEVICE_NEIGHBOURS", "STAGE_BYTES"]

MIN_DEVICE_NEIGHBOURS = 2
"""The fewest neighbour copies worth moving a node to the GPU for: with one, each mix pulls toward
a single partner, and a CPU node with its full `max_neighbours` mixes better."""
STAGE_BYTES = 2.5
"""Bytes a parameter for the largest stage's temporaries (a publish's kept entries and an update's
sum into a copy): what `benchmarks/scale.py` measures a stage's rise at, rounded up
(docs/performance.md)."""
_GIB = 1 << 30


@dataclass(frozen=True)
class Placement:
    """The device a node holds its copies on, how many neighbour copies it keeps there, and why."""

    device: str
    max_neighbours: int
    reason: str

    @property
    def on_device(self) -> bool:
        return self.device != "cpu"


def _bytes_per_parameter(cfg: GossipConfig) -> tuple[float, float]:
    """(the node's own bytes a parameter: x̂, the hand-over, the averaged weights, a stage's
    temporaries; each neighbour copy's)."""
    copy = 2.0 if cfg.copy_dtype == "bfloat16" else 4.0
    average = 0.0 if cfg.average_sigma_rel <= 0 else (3.0 if cfg.average_dtype != "float32" else 4.0)
    return copy + 2.0 + average + STAGE_BYTES, copy


def place_node(cfg: GossipConfig, numel: int, trainer_device: str, add_in_place: bool) -> Placement:
    """Where a node of `numel` parameters holds its copies, for a trainer whose parameters live on
    `trainer_device` ("cpu", "cuda:0", "mps") and can (or cannot) be added into in place."""
    cpu = Placement("cpu", cfg.max_neighbours, "")
    if trainer_device == "cpu":
        return cpu
    if not trainer_device.startswith("cuda"):
        return Placement("cpu", cfg.max_neighbours, f"gossip on the CPU: the node's arithmetic runs on CUDA devices, "
                                                    f"not {trainer_device} (its distances fall back to float64)")
    if cfg.device_budget_gib <= 0:
        return Placement("cpu", cfg.max_neighbours, f"gossip on the CPU: device_budget_gib is 0 (set it to hold the "
                                                    f"node's copies on {trainer_device})")
    if not cfg.handover_bfloat16 or not add_in_place:
        why = "the node keeps float32 parameters (partner steps, or float32 copies)" if not cfg.handover_bfloat16 else "the trainer cannot add a mix in place"
        return Placement("cpu", cfg.max_neighbours, f"gossip on the CPU: {why}")
    own, each = _bytes_per_parameter(cfg)
    budget = cfg.device_budget_gib * _GIB
    fit = math.floor((budget - own * numel) / (each * numel)) if numel else cfg.max_neighbours
    need = min(MIN_DEVICE_NEIGHBOURS, cfg.max_neighbours)
    if fit < need:
        least = (own + need * each) * numel / _GIB
        held = max(fit, 0)
        return Placement("cpu", cfg.max_neighbours, f"gossip on the CPU: {cfg.device_budget_gib:g} GiB of {trainer_device} "
                                                    f"holds {held} neighbour cop{'y' if held == 1 else 'ies'}; "
                                                    f"{least:.1f} GiB holds {need}")
    kept = min(cfg.max_neighbours, fit)
    used = (own + kept * each) * numel / _GIB
    return Placement(trainer_device, kept, f"gossip on {trainer_device}: {kept} neighbour copies, about {used:.1f} GiB "
                                           f"of the {cfg.device_budget_gib:g} GiB budget")
