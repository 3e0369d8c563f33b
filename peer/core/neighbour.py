"""What a node holds of one neighbour, and what one exchange told it (plain records)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from async_opt import NeighbourCopy
from peer.core.view import CopyView


APPLIED_REMEMBERED = 8
"""Update frames remembered per neighbour: a duplicate is the newest one or two."""


@dataclass
class Neighbour:
    """What this peer knows of one neighbour (keyed by public key)."""

    copy: NeighbourCopy = field(default_factory=NeighbourCopy)
    epoch: int = 0
    version: int = 0  # node-wide counter value when copy.x_hat last changed
    pulled: int = 0  # `version` as of our latest exchange we started with it (0: never pulled)
    acked_epoch: int = 0  # our epoch the neighbour last reported holding
    acked_seq: int = -1  # our last update seq it holds (-1: nothing, send a snapshot)
    listen: str = ""
    step: int = 0
    last_heard: float = 0.0
    published_at: float = 0.0  # min(sender's timestamp, our receive time) of the newest frame applied
    applied: deque[bytes] = field(default_factory=lambda: deque(maxlen=APPLIED_REMEMBERED))
    """Signatures of the latest update frames applied to `copy`. One arriving again (a partner's
    request pushes the update our own pull just brought) is a duplicate known without decoding its
    payload, once its signature checked out: only then does the signature stand for its bytes."""

    def reset_copy(self, epoch: int) -> None:
        """Void what we held of this neighbour (a new run of it, or a copy that overflowed)."""
        self.copy, self.epoch = NeighbourCopy(), epoch
        self.applied.clear()

    def hold(self, x_hat: torch.Tensor, epoch: int, seq: int, step: int, published_at: float, version: int) -> None:
        """Hold `x_hat` as this neighbour's copy at its (epoch, seq), as a snapshot would set it (a
        state we adopted from it: `peer.core.state_seed`); `version`: the node's counter."""
        self.reset_copy(epoch)
        self.copy.set_snapshot(seq, x_hat, step)
        self.step, self.published_at, self.version = step, published_at, version

    def owes(self, step: int) -> bool:
        """Whether a neighbour that says it is at `step` (the step of its last publish, as its
        control frame carries it) has published past the copy we hold of it: only then should
        its answer have brought something."""
        return self.copy.x_hat is None or step > self.copy.step

    def holds(self, signature: bytes) -> bool:
        """Whether an update frame with this signature was applied to the copy held now."""
        return signature in self.applied


@dataclass(frozen=True)
class ExchangeResult:
    """What an ingested exchange body told us about its sender."""

    sender: bytes
    listen: str
    step: int
    frames_in: int
    refused: int
    accepted: bool = True
    """False when the control frame held no live ticket of ours: nothing of it was applied."""
    news: int = 0
    """Frames that changed our copy of the sender: what an answer to our pull brought
    (`Session.exchange_done(carried=...)`; a partner whose answers keep bringing none is replaced)."""
    owed: bool = True
    """The sender's step is past the copy we hold of it (`Neighbour.owes`): an answer without news
    then withheld what it had. An honest partner between two of its publishes owes nothing, however
    long its publish period and however often we ask (`Session.exchange_done(owed=...)`)."""


def copy_views(neighbours: dict[bytes, Neighbour]) -> list[CopyView]:
    """What a view shows of each neighbour we hold a copy of."""
    return [CopyView(key, n.version, n.copy.x_hat, n.published_at, n.copy.seq, n.copy.step, n.pulled)
            for key, n in neighbours.items() if n.copy.x_hat is not None]


def evict(neighbours: dict[bytes, Neighbour]) -> bytes:
    """Drop one neighbour to make room and return its key: copies only pushed at us go first,
    then the longest unheard."""
    gone = min(neighbours, key=lambda k: (neighbours[k].pulled > 0, neighbours[k].last_heard))
    del neighbours[gone]
    return gone
