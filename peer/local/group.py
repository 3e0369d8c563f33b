"""A torchrun group as one peer: rank 0 drives the Trainer seam, the other ranks follow.

Only rank 0 runs the network, gossip and checkpoints. It sees the group through
`GroupTrainer`, an ordinary `Trainer`: every call that the other ranks must take part in
(a step, a mix, a checkpoint that gathers shards, a resume, an adoption, scoring an offered
state on a probe batch) is first announced with a command broadcast from rank 0, then run on every rank with the same collectives in the
same order. The other ranks run `follow()`, which waits for the next command and mirrors
it, so they reach every step boundary with rank 0 and are handed the mixed parameters
there. Nothing here knows the model: the inner trainer does the DDP/FSDP2 work, and says
with `Capabilities.collective_reads` whether reading its parameters needs every rank (FSDP2 shards).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import torch
import torch.distributed as dist

from peer.trainer import Capabilities, ParamSpec, StepStats, Trainer

log = logging.getLogger(__name__)

STEP, GET, SET, STATE, LOAD, STOP, PROBE, SCALE, ADOPT = range(9)


class GroupComm:
    """The few collectives the seam needs, on the process group's device (CUDA for NCCL, CPU for gloo)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def command(self, code: int | None = None) -> int:
        """Rank 0 sends `code`; every rank returns it."""
        t = torch.tensor([-1 if code is None else code], dtype=torch.int64, device=self.device)
        dist.broadcast(t, src=0)
        return int(t.item())

    def flat(self, flat: torch.Tensor | None, numel: int) -> torch.Tensor:
        """Rank 0's float32 vector on every rank (as a CPU tensor)."""
        buf = flat.to(self.device, torch.float32) if flat is not None else torch.empty(numel, device=self.device)
        dist.broadcast(buf, src=0)
        return buf.cpu()

    def scalar(self, value: float | None) -> float:
        """Rank 0's float on every rank."""
        t = torch.tensor([0.0 if value is None else value], dtype=torch.float64, device=self.device)
        dist.broadcast(t, src=0)
        return float(t.item())

    def state(self, item: tuple[dict[str, torch.Tensor], dict[str, Any]] | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Rank 0's (tensors, meta) on every rank: layout and meta as objects, then each tensor."""
        header: list[Any] = [None]
        if item is not None:
            tensors, meta = item
            header = [([(k, tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in tensors.items()], meta)]
        dist.broadcast_object_list(header, src=0, device=self.device)
        layout, meta = header[0]
        out: dict[str, torch.Tensor] = {}
        for key, shape, dtype in layout:
            buf = item[0][key].to(self.device) if item is not None else torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
            dist.broadcast(buf, src=0)
            out[key] = buf.cpu()
        return out, meta

    def stats(self, stats: StepStats) -> StepStats:
        """The group's step: mean loss, summed samples and audio; rank 0's extras (its device's MFU)."""
        t = torch.tensor([stats.loss, stats.samples, stats.audio_seconds], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        loss, samples, audio = t.tolist()
        return StepStats(stats.step, loss / self.world_size, int(round(samples)), audio, dict(stats.extra))

    def same_everywhere(self, expected: torch.Tensor, held: torch.Tensor) -> list[bool]:
        """Rank 0: per rank, whether the parameters it holds equal `expected` (a fingerprint each, gathered)."""
        mine = torch.tensor([_fingerprint(held) == _fingerprint(expected)], dtype=torch.int64, device=self.device)
        gathered = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(gathered, mine)
        return [bool(g.item()) for g in gathered]


def _fingerprint(x: torch.Tensor) -> tuple[float, float]:
    """Sum and a position-weighted sum in float64: any change to any value shows."""
    x = x.detach().reshape(-1).double()
    w = torch.arange(x.numel(), dtype=torch.float64).remainder_(997).add_(1)
    return float(x.sum()), float((x * w).sum())


class GroupTrainer(Trainer):
    """Rank 0's Trainer for the whole group: each call runs on every rank, in lockstep.

    Calls come from the training thread and, while joining, the network thread
    (adopting a neighbour's state); a lock keeps each command and its collectives whole.
    """

    def __init__(self, inner: Trainer, comm: GroupComm, *, verify: bool = False) -> None:
        self.inner, self.comm, self.verify = inner, comm, verify
        self.collective_reads = inner.capabilities.collective_reads
        self._numel = sum(int(torch.Size(shape).numel()) for shape, _ in inner.param_spec().values())
        self._lock = threading.RLock()
        self._closed = False
        self.mixes_verified = 0
        """Mixes after which every rank was checked to hold rank 0's parameters (`verify`)."""

    @property
    def capabilities(self) -> Capabilities:
        """The group probes when its inner trainer does; it neither mixes in place nor scales
        its rate on rollbacks (no command carries those to the other ranks)."""
        return Capabilities(probe=self.inner.capabilities.probe, additive_steps=self.inner.capabilities.additive_steps,
                            collective_reads=self.collective_reads)

    @property
    def step_count(self) -> int:
        return self.inner.step_count

    def step(self) -> StepStats:
        with self._lock:
            self.comm.command(STEP)
            return self.comm.stats(self.inner.step())

    def param_spec(self) -> ParamSpec:
        return self.inner.param_spec()

    def get_flat_params(self) -> torch.Tensor:
        with self._lock:
            if self.collective_reads:
                self.comm.command(GET)
            return self.inner.get_flat_params()

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """Rank 0's parameters, rounded as its inner trainer rounds them (the Trainer seam). The other
        ranks follow a `GET`: reading the parameters to round them takes the same collectives in the
        same order as `get_flat_params` (FSDP2's gathers, a tensor at a time)."""
        with self._lock:
            if self.collective_reads:
                self.comm.command(GET)
            return self.inner.flat_params_bf16(generator, device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        with self._lock:
            self.comm.command(SET)
            flat = self.comm.flat(flat, self._numel)
            self.inner.set_flat_params(flat)
            if self.verify:
                same = self.comm.same_everywhere(flat, self.inner.get_flat_params())
                if not all(same):
                    raise RuntimeError(f"after a mix, ranks {[r for r, ok in enumerate(same) if not ok]} "
                                       "hold other parameters than rank 0")
                self.mixes_verified += 1

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        """Every rank takes rank 0's adopted parameters and step (their schedules stay in lockstep)."""
        with self._lock:
            self.comm.command(ADOPT)
            self.inner.adopt(self.comm.flat(flat, self._numel), int(self.comm.scalar(step)))

    def set_step_scale(self, scale: float) -> None:
        """Every rank steps at rank 0's multiplier (each rank runs its own optimiser)."""
        with self._lock:
            self.comm.command(SCALE)
            self.inner.set_step_scale(self.comm.scalar(scale))

    def probe_better(self, flat: torch.Tensor) -> bool | None:
        """Whether `flat` scores better than the group's parameters on a probe batch; rank 0 decides.

        Every rank scores it (a sharded or DDP forward needs them all); only rank 0's verdict,
        on its own probe batch, counts. None when the inner trainer cannot judge."""
        if not self.inner.capabilities.probe:
            return None
        with self._lock:
            self.comm.command(PROBE)
            return bool(self.inner.probe_better(self.comm.flat(flat, self._numel)))

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        with self._lock:
            if self.collective_reads:
                self.comm.command(STATE)
            return self.inner.state_tensors()

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        with self._lock:
            self.comm.command(LOAD)
            tensors, meta = self.comm.state((tensors, meta))
            self.inner.load_state_tensors(tensors, meta)

    def close(self) -> None:
        """Release the followers (they return from `follow`), then close the inner trainer."""
        with self._lock:
            if not self._closed:
                self._closed = True
                try:
                    self.comm.command(STOP)
                except Exception as exc:  # the group is already broken: nothing to release
                    log.warning("could not stop the other ranks: %s", exc)
        self.inner.close()


def follow(inner: Trainer, comm: GroupComm, *, verify: bool = False) -> int:
    """A non-zero rank: mirror rank 0's commands until it stops the group; the steps taken."""
    numel = sum(int(torch.Size(shape).numel()) for shape, _ in inner.param_spec().values())
    while True:
        code = comm.command()
        if code == STEP:
            comm.stats(inner.step())
        elif code == GET:
            inner.get_flat_params()
        elif code == SET:
            flat = comm.flat(None, numel)
            inner.set_flat_params(flat)
            if verify:
                comm.same_everywhere(flat, inner.get_flat_params())
        elif code == STATE:
            inner.state_tensors()
        elif code == LOAD:
            tensors, meta = comm.state(None)
            tensors.pop("rng.torch", None)  # rank 0's noise stream; this rank keeps its own
            inner.load_state_tensors(tensors, meta)
        elif code == SCALE:
            inner.set_step_scale(comm.scalar(None))
        elif code == ADOPT:
            inner.adopt(comm.flat(None, numel), int(comm.scalar(None)))
        elif code == PROBE:
            inner.probe_better(comm.flat(None, numel))  # rank 0's verdict is the group's
        elif code == STOP:
            return inner.step_count
        else:
            raise RuntimeError(f"unknown group command {code} from rank 0")
