"""A joiner's copy of the peer whose state it adopted, taken from that state.

Where a peer's public copy x̂ is what `/v1/state` serves (bfloat16 copies, no partner steps:
`GossipNode.served`), its state names the epoch and sequence number of that x̂. A joiner that
adopts it then already holds that peer's copy exactly: its first exchange with it asks only for
the updates since (`Control.have_seq`) instead of a whole snapshot, which at the sizes people
train is hundreds of megabytes to decode. A state without those fields (exact parameters, or an
older peer) seeds nothing. The claim costs the sender nothing it could not do with a snapshot of
its own copy: it is signed by the sender, and names the sender's own copy only.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from peer.core.neighbour import Neighbour

STATE_EPOCH, STATE_SEQ = "epoch", "copy_seq"
"""Keys of a state header's `extra` naming the x̂ it is: the sender's epoch and that x̂'s seq."""
_MAX_INT = 2 ** 63 - 1
MAX_REMEMBERED = 8
"""States read and not yet dropped whose sources are remembered: a join fetches a few at most."""


@dataclass(frozen=True)
class StateSource:
    """Whose public copy a state is: what a copy of that peer seeded from it needs."""

    sender: bytes
    epoch: int
    seq: int
    step: int
    published_at: float
    dtype: torch.dtype


def public_copy_fields(epoch: int, seq: int) -> dict[str, int]:
    """The state header's fields naming our x̂ at (epoch, seq)."""
    return {STATE_EPOCH: int(epoch), STATE_SEQ: int(seq)}


def source_of(extra: dict, sender: bytes, step: int, published_at: float, dtype: torch.dtype) -> StateSource | None:
    """The source a verified state names, or None where it names none (or names it malformed:
    the state is still a state, it only seeds nothing)."""
    epoch, seq = extra.get(STATE_EPOCH), extra.get(STATE_SEQ)
    if type(epoch) is not int or type(seq) is not int or not (1 <= epoch <= _MAX_INT and 0 <= seq <= _MAX_INT):
        return None
    return StateSource(sender, epoch, seq, step, published_at, dtype)


def seed(n: Neighbour, x: torch.Tensor, source: StateSource, version: int) -> None:
    """Hold the adopted state `x` as `n`'s copy (its sender's), in the precision it holds it;
    `version`: the node's counter for a changed copy."""
    n.hold(x.detach().to(source.dtype), source.epoch, source.seq, source.step, source.published_at, version)


class OfferedStates:
    """The sources of the states read while joining, by the tensor each was read into, held
    weakly: the driver holds a state until it adopts or drops it (`peer.core.fetched`), and
    `GossipNode.adopt` is handed that same tensor. One owner: the node's."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[torch.Tensor], StateSource]] = {}

    def remember(self, x: torch.Tensor, source: StateSource | None) -> None:
        self._by_id = {k: v for k, v in self._by_id.items() if v[0]() is not None}
        if source is not None and len(self._by_id) < MAX_REMEMBERED:
            self._by_id[id(x)] = (weakref.ref(x), source)

    def take(self, x: torch.Tensor) -> StateSource | None:
        """The source of `x` if it is a state read here (and forget it)."""
        held = self._by_id.pop(id(x), None)
        return held[1] if held is not None and held[0]() is x else None
