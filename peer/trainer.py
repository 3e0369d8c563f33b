"""The Trainer seam: what a peer needs from any model to train it and gossip about it.

The peer never imports the TTS code; it drives whatever object satisfies this protocol
(the TTS trainer in `gossip_tts`, a quadratic in tests, a small MLP in simnet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

ParamSpec = dict[str, tuple[tuple[int, ...], str]]


@dataclass
class StepStats:
    """What one local optimisation step reports (for progress lines and /metrics)."""

    step: int  # the trainer's step count after this step
    loss: float
    samples: int  # examples consumed by this step
    audio_seconds: float = 0.0  # real audio in those examples (0 for non-audio trainers)
    extra: dict[str, float] = field(default_factory=dict)  # lr, grad_norm, ...


@runtime_checkable
class Trainer(Protocol):
    """One local model replica with its optimiser and data stream."""

    @property
    def step_count(self) -> int: ...

    def step(self) -> StepStats:
        """Run one local optimisation step."""
        ...

    def param_spec(self) -> ParamSpec:
        """Names, shapes and dtypes of the gossiped parameters, in flat-vector order."""
        ...

    def get_flat_params(self) -> torch.Tensor:
        """A float32 CPU copy of all gossiped parameters as one 1-D vector."""
        ...

    def set_flat_params(self, flat: torch.Tensor) -> None:
        """Overwrite the parameters from a 1-D vector laid out as `get_flat_params`.

        A trainer may also offer `add_to_flat_params(delta)` (add in place); the step-boundary
        hook then mixes with one pass over the parameters instead of a copy out and back."""
        ...

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        """Take a neighbour's state as ours when joining: its parameters (as `set_flat_params`)
        and its step, which `step_count` then counts on from. A step counts the training the
        parameters hold, so progress, the learning-rate schedule, `max_steps` and what we tell
        other peers go on from where the swarm is; the optimiser's state stays our own."""
        ...

    def set_step_scale(self, scale: float) -> None:
        """Multiply the configured step size (learning rate) by `scale` (> 0) from the next step
        on, replacing any earlier multiplier: the swarm's step-size rule sets it
        (`async_opt.step_scale`); 1 is the trainer's own rate."""
        ...

    def state_tensors(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Everything needed to resume (weights, optimiser, RNG) as tensors + JSON-able meta."""
        ...

    def load_state_tensors(self, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """Restore what `state_tensors` returned."""
        ...

    def close(self) -> None: ...


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate tensors into one float32 CPU vector (the gossip layout)."""
    if not tensors:
        return torch.zeros(0, dtype=torch.float32)
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copy a flat vector back into `tensors` in place; refuses a vector of the wrong size."""
    total = sum(t.numel() for t in tensors)
    if flat.numel() != total:
        raise ValueError(f"flat vector has {flat.numel()} values, the parameters need {total}")
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t).to(t.device, t.dtype))
            offset += n


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
