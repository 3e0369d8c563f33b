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

import dataclasses
import weakref
from dataclasses import dataclass

import torch

from async_opt import safe_distances, safe_norm


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
    distance: float | None = None
    """||x̂_j − x̂_i|| against the view's public copy, measured by the node worker when it built
    the view (None: not measured; the reader measures it): a pass over the model that the
    training thread then does not make."""


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


class ViewBuilder:
    """Builds each `MixView` on the node's owner thread, measuring there what the training thread
    would otherwise measure at its step boundary: ||x̂_i|| once per public copy, and the distance
    ||x̂_j − x̂_i|| of each copy that changed (one pass over x̂_i for all of them).

    A copy that did not change while x̂_i did (we published) is left unmeasured: the mixer only
    mixes news, and news arrives as a changed copy, measured then; the rare copy mixed after a
    publish of ours is measured by its reader. It remembers tensors weakly: a measurement never
    keeps an old parameter-sized copy alive.
    """

    def __init__(self) -> None:
        self._norm: tuple[weakref.ref, float] | None = None
        self._distances: dict[bytes, tuple[weakref.ref, weakref.ref, float]] = {}

    def build(self, public: torch.Tensor, copies: list[CopyView], published_at: float | None,
              moves: tuple[float, ...]) -> MixView:
        """A view of `public` and `copies` (their `distance` left None), with the distances filled in."""
        if self._norm is None or self._norm[0]() is not public:
            self._norm = (weakref.ref(public), safe_norm(public))
        known: dict[bytes, float] = {}
        changed = []
        for c in copies:
            m = self._distances.get(c.key)
            if m is None or m[0]() is not c.x_hat:
                changed.append(c)
            elif m[1]() is public:
                known[c.key] = m[2]
        measured = safe_distances([c.x_hat for c in changed], public) if changed else []
        fresh = {c.key: (weakref.ref(c.x_hat), weakref.ref(public), d) for c, d in zip(changed, measured)}
        self._distances = {c.key: fresh.get(c.key) or self._distances[c.key] for c in copies}
        known.update((key, m[2]) for key, m in fresh.items())
        measured = tuple(dataclasses.replace(c, distance=known.get(c.key)) for c in copies)
        return MixView(public, measured, self._norm[1], published_at, moves)
