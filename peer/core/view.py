"""What the training thread mixes from: an immutable snapshot of the gossip state.

The node worker is the only writer of the gossip state (`peer.core.node.GossipNode`). After
every change it builds a new `MixView` and stores it in a `ViewSlot`; the training thread
reads the slot at a step boundary and mixes from what it got. Nothing in a view is ever
written to after it is published (`PublicCopy` and `NeighbourCopy` replace their tensors
instead of updating them in place), so the reader needs no lock and never waits for the
writer, and the writer never waits for the reader. Replacing the reference is one
attribute store, which Python makes atomic. See docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class CopyView:
    """One neighbour's public copy x̂_j as of the view."""

    key: bytes
    """The neighbour's public key."""
    version: int
    """Changes whenever x̂_j changes (node-wide counter): the mixer mixes each version once."""
    x_hat: torch.Tensor
    published_at: float
    """When what we hold was published, by our clock (the sender's stamp, mirrored about our
    receive time when it claims to be later: `GossipNode._apply`)."""
    seq: int = 0
    """The copy's own publish counter, from its newest update (tells the sender's publish rate)."""
    step: int = 0
    """The sender's training step at the copy's newest update (as it claims: tells how far ahead it is)."""
    pulled: int = 0
    """`version` as of the latest exchange this peer started with that neighbour (0: never). Only
    pulls move our parameters (`GossipConfig.pull_only`): a copy pushed at us waits for our own
    turn with its sender, so a neighbour cannot buy pulls by exchanging with us more often."""


@dataclass(frozen=True)
class MixView:
    """Our public copy x̂_i and the neighbour copies, all taken at one moment."""

    public: torch.Tensor
    copies: tuple[CopyView, ...] = ()
    public_norm: float = 0.0
    """||x̂_i||, computed by the node worker when it builds the view (bounds the clip radius)."""
    public_published_at: float | None = None
    """When x̂_i was last published, by our clock (None before the first publish)."""
    public_moves: tuple[float, ...] | None = None
    """How far x̂_i moved at each of its recent publishes (`PublicCopy.moves`; the node always
    fills it): bounds the clip radius before enough neighbours are known (`NeighbourRadius`)."""


class ViewSlot:
    """The one hand-over point between the node worker (writer) and the training thread (reader)."""

    def __init__(self, view: MixView) -> None:
        self._view = view

    def publish(self, view: MixView) -> None:
        """Writer side: replace the current view (never mutate one already published)."""
        self._view = view

    @property
    def current(self) -> MixView:
        """Reader side: the newest view; keep using the object you got, it never changes."""
        return self._view
