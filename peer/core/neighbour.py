"""What a node holds of one neighbour, and what one exchange told it (plain records, no logic)."""

from __future__ import annotations

from dataclasses import dataclass, field

from async_opt import NeighbourCopy


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
