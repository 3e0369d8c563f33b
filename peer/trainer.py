"""The Trainer seam: what a peer needs from any model to train it and gossip about it.

The peer never imports the TTS code; it drives whatever subclass of `Trainer` it is given
(the TTS trainer in `gossip_tts`, a quadratic in tests, a small MLP in simnet), and asks
its `Capabilities` before calling any optional method.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch

from async_opt.stochastic_round import stochastic_round_bf16
from protocol.header import ParamSpec


@dataclass
class StepStats:
    """What one local optimisation step reports (for progress lines and /metrics)."""

    step: int  # the trainer's step count after this step
    loss: float
    samples: int  # examples consumed by this step
    audio_seconds: float = 0.0  # real audio in those examples (0 for non-audio trainers)
    extra: dict[str, float] = field(default_factory=dict)  # lr, grad_norm, ...


@dataclass(frozen=True)
class Capabilities:
    """What a trainer offers beyond the required methods. The peer asks here, never by looking
    for attributes, so a trainer's author sees in this file all a peer may call."""

    probe: bool = False
    """`probe_better`: scores an offered state against ours, so a joiner adopts only a better one
    (without it a joiner adopts the state furthest along)."""
    add_in_place: bool = False
    """`add_to_flat_params`: a mix adds its delta in one pass instead of a copy out and back."""
    scale_lr: bool = False
    """`scale_lr`: a rollback to a good state lowers every later learning rate."""
    additive_steps: bool = False
    """Its optimiser's step is a fixed multiple of its gradient (plain SGD, or with momentum), so
    another replica's steps can be added to ours as a step on that replica's batch
    (`GossipConfig.partner_steps`). Adam-type steps are normalised per coordinate: adding a
    partner's multiplies the step size instead (docs/mixing.md#partner-steps)."""
    collective_reads: bool = True
    """Reading the parameters or the state needs every rank of a torchrun group (FSDP2 shards);
    True is always safe, False saves the group a broadcast per read."""
    device: str = "cpu"
    """Where the parameters `get_flat_params` reads live ("cpu", "cuda:0", "mps"): a node may hold
    its copies there (`GossipConfig.device_budget_gib`, peer.core.placement)."""


class Trainer(abc.ABC):
    """One local model replica with its optimiser and data stream.

    Every trainer subclasses this and states its `capabilities`; the optional methods below
    are called only when declared there (their defaults refuse)."""

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """Which optional methods this trainer implements."""

    @property
    @abc.abstractmethod
    def step_count(self) -> int: ...

    @abc.abstractmethod
    def step(self) -> StepStats:
        """Run one local optimisation step."""

    @abc.abstractmethod
    def param_spec(self) -> ParamSpec:
        """Names, shapes and dtypes of the gossiped parameters, in flat-vector order."""

    @abc.abstractmethod
    def get_flat_params(self) -> torch.Tensor:
        """A float32 CPU copy of all gossiped parameters as one 1-D vector."""

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """`get_flat_params` as a new bfloat16 vector on `device` (None: the CPU; a node on the
        trainer's GPU names it), stochastically rounded (unbiased: the rounding of x is x on
        average, `async_opt.stochastic_round_bf16`) with random bits from `generator` (a CPU one):
        half the bytes of the float32 copy, for a publish to take its residual in. This default
        rounds `get_flat_params()` a piece at a time, so that float32 copy is still made for a
        moment; a trainer that can round its own tensors overrides it (`flatten_bf16`) to make none."""
        flat = self.get_flat_params()
        return flatten_bf16([flat], flat.numel(), generator, device)

    @abc.abstractmethod
    def set_flat_params(self, flat: torch.Tensor) -> None:
        """Overwrite the parameters from a 1-D vector laid out as `get_flat_params`."""

    @abc.abstractmethod
    def adopt(self, flat: torch.Tensor, step: int) -> None:
        """Take a neighbour's state as ours when joining: its parameters (as `set_flat_params`)
        and its step, which `step_count` then counts on from. A step counts the training the
        parameters hold, so progress, the learning-rate schedule, `max_steps` and what we tell
        other peers go on from where the swarm is; the optimiser's state stays our own."""

    @abc.abstractmethod
    def set_step_scale(self, scale: float) -> None:
        """Multiply the configured step size (learning rate) by `scale` (> 0) from the next step
        on, replacing any earlier multiplier: the swarm's step-size rule sets it
        (`async_opt.step_scale`); 1 is the trainer's own rate."""

    @abc.abstractmethod
    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Everything needed to resume (weights, optimiser, RNG) as tensors + JSON-able meta."""

    @abc.abstractmethod
    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Restore what `state_tensors` returned."""

    @abc.abstractmethod
    def close(self) -> None: ...

    # --- optional: called only when `capabilities` says so ------------------------------
    def probe_better(self, flat: torch.Tensor) -> bool | None:
        """Whether parameters `flat` score strictly better than ours (a non-finite score never
        does); None when this trainer cannot judge. `Capabilities.probe`."""
        raise NotImplementedError(f"{type(self).__name__} does not declare Capabilities(probe=True)")

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
        """Add `delta` in place to the parameters' entries `start` to `start + delta.numel()` of the
        layout `get_flat_params` returns, a span of whole parameter tensors (`param_spec` order): a
        mix adds its change one tensor at a time, never building it whole. `Capabilities.add_in_place`."""
        raise NotImplementedError(f"{type(self).__name__} does not declare Capabilities(add_in_place=True)")

    def scale_lr(self, factor: float) -> None:
        """Multiply every later learning rate by `factor` (a rollback lowers it). `Capabilities.scale_lr`."""
        raise NotImplementedError(f"{type(self).__name__} does not declare Capabilities(scale_lr=True)")


class WrappedTrainer(Trainer):
    """A trainer that forwards every call to `inner`: a wrapper overrides only what it changes."""

    def __init__(self, inner: Trainer) -> None:
        self.inner = inner

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @property
    def step_count(self) -> int:
        return self.inner.step_count

    def step(self) -> StepStats:
        return self.inner.step()

    def param_spec(self) -> ParamSpec:
        return self.inner.param_spec()

    def get_flat_params(self) -> torch.Tensor:
        return self.inner.get_flat_params()

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """The inner trainer's: a wrapper that changes `get_flat_params` overrides this too."""
        return self.inner.flat_params_bf16(generator, device)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        self.inner.set_flat_params(flat)

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        self.inner.adopt(flat, step)

    def set_step_scale(self, scale: float) -> None:
        self.inner.set_step_scale(scale)

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return self.inner.state_tensors()

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        self.inner.load_state_tensors(tensors, meta)

    def close(self) -> None:
        self.inner.close()

    def probe_better(self, flat: torch.Tensor) -> bool | None:
        return self.inner.probe_better(flat)

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
        self.inner.add_to_flat_params(delta, start)

    def scale_lr(self, factor: float) -> None:
        self.inner.scale_lr(factor)


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors into one float32 CPU vector (the gossip layout)."""
    if not tensors:
        return torch.zeros(0, dtype=torch.float32)
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors])


def flatten_bf16(tensors: Iterable[torch.Tensor], numel: int, generator: torch.Generator,
                 device: torch.device | None = None) -> torch.Tensor:
    """`flatten` of tensors of `numel` entries in all, stochastically rounded to bfloat16
    (`async_opt.stochastic_round_bf16`) into a new vector on `device` (None: the CPU), one tensor at
    a time: no float32 copy of them all is made. A tensor off the CPU is rounded where it lives and
    its bfloat16 result copied to `device`, half the bytes of its float32 copy (none cross where it
    lives there: a node on the trainer's GPU); its random bits come from a generator on that device
    seeded from `generator` (a CPU one), so the result is a function of `generator`'s state.
    float32 and bfloat16 tensors are read as they are; any other dtype is converted to float32 first."""
    if generator.device.type != "cpu":
        raise ValueError(f"flatten_bf16 takes a CPU generator, got one on {generator.device}")
    out, offset = torch.empty(numel, dtype=torch.bfloat16, device=device), 0
    on_device: dict[torch.device, torch.Generator] = {}
    for t in tensors:
        flat = t.detach().reshape(-1)
        if flat.dtype not in (torch.float32, torch.bfloat16):
            flat = flat.to(torch.float32)
        part = out[offset : offset + flat.numel()]
        if part.numel() != flat.numel():
            raise ValueError(f"the tensors hold more than the {numel} values they were said to")
        if flat.device.type == "cpu":
            bits = generator
        elif (bits := on_device.get(flat.device)) is None:
            seed = int(torch.randint(0, 1 << 62, (), generator=generator))
            bits = on_device[flat.device] = torch.Generator(device=flat.device).manual_seed(seed)
        staged = part if part.device == flat.device else torch.empty_like(flat, dtype=torch.bfloat16)
        if stochastic_round_bf16(flat, staged, bits) is not part:
            part.copy_(staged)
        offset += flat.numel()
    if offset != numel:
        raise ValueError(f"the tensors hold {offset} values, {numel} were said")
    return out


def _parts_of(flat: torch.Tensor, tensors: list[torch.Tensor]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Each tensor with its slice of `flat`, moved to its device and dtype one at a time (a GPU
    holds one part beside the parameters, not all); refuses a vector of the wrong size before the first."""
    total = sum(t.numel() for t in tensors)
    if flat.numel() != total:
        raise ValueError(f"flat vector has {flat.numel()} values, the parameters need {total}")
    offset = 0
    for t in tensors:
        yield t, flat[offset : offset + t.numel()].view_as(t).to(t.device, t.dtype)
        offset += t.numel()


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copy a flat vector back into `tensors` in place; refuses a vector of the wrong size."""
    with torch.no_grad():
        for t, part in _parts_of(flat, tensors):
            t.copy_(part)


def spanned(sizes: list[int], start: int, length: int) -> list[tuple[int, int]]:
    """(index, offset in the span) of the tensors of `sizes` (flat order) that flat entries `start`
    to `start + length` cover; refuses a span that is not made of whole tensors."""
    out, offset = [], 0
    for i, size in enumerate(sizes):
        if start <= offset and offset + size <= start + length:
            out.append((i, offset - start))
        offset += size
    if sum(sizes[i] for i, _ in out) != length or start + length > offset:
        raise ValueError(f"a change of {length} values at {start} does not span whole parameters of the {offset} there are")
    return out


def add_flat_into(flat: torch.Tensor, tensors: list[torch.Tensor], start: int = 0) -> None:
    """Add `flat`, entries `start` on of the flat layout, to the whole `tensors` it spans in place (a
    mix's change: one pass, no copy out and back); refuses a span of partial tensors."""
    with torch.no_grad():
        for i, at in spanned([t.numel() for t in tensors], start, flat.numel()):
            t = tensors[i]
            t.add_(flat[at : at + t.numel()].view_as(t).to(t.device, t.dtype))


def split_flat(flat: torch.Tensor, spec: "ParamSpec", prefix: str = "") -> dict[str, torch.Tensor]:
    """A flat vector laid out as `spec` (names in flat order) as named tensors of its shapes, each
    its own copy (safetensors refuses tensors that share storage)."""
    total = sum(math.prod(shape) for shape, _ in spec.values())
    if flat.numel() != total:
        raise ValueError(f"flat vector has {flat.numel()} values, the parameters need {total}")
    out, offset = {}, 0
    for name, (shape, _) in spec.items():
        n = math.prod(shape)
        out[prefix + name] = flat[offset : offset + n].reshape(shape).clone()
        offset += n
    return out
