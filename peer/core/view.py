"""What the training thread mixes from: a snapshot of the gossip state, and who may read it when.

The node worker is the only writer of the gossip state (`peer.core.node.GossipNode`). After
every change it builds a new `MixView` and stores it in a `ViewSlot`; the training thread
reads the slot at a step boundary and mixes from what it got. A view's fields never change.
Its tensors are the copies themselves, and the worker adds updates into them in place (a
new copy at every update would be one more half of the model alive at each ingest and
publish), so a copy is written only while no mix can read it: the worker first publishes a
view that marks the copy busy (`MixView.busy`, `MixView.public_busy`), waits out a mix that
may have started from an older view (`ViewSlot.settle`: the mixer holds the slot's lock
while it reads tensors, `ViewSlot.reading`), writes, and then publishes a view with the new
version and distances. The training thread never waits on the writer's work, only for that
hand-over of the lock; a copy being written is mixed at a later boundary. See
docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import weakref
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterator

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
    public_version: int = 0
    """Changes whenever x̂_i changes (a publish, a reset): what a measurement against it is keyed by."""
    busy: frozenset[bytes] = frozenset()
    """Keys of the copies the worker is writing now: their tensors must not be read, nor mixed."""
    public_busy: bool = False
    """The worker is writing x̂_i now: nothing may be mixed from this view."""

    def mixable(self, c: CopyView) -> bool:
        """Whether `c`'s tensor may be read under `ViewSlot.reading` (neither it nor x̂_i is being written)."""
        return not self.public_busy and c.key not in self.busy


class ViewSlot:
    """The one hand-over point between the node worker (writer) and the training thread (reader)."""

    def __init__(self, view: MixView, gate: AbstractContextManager[object] | None = None) -> None:
        """`gate`: held by a mix while it reads tensors and taken by `settle` to wait one out: a
        lock where the mix runs on another thread than the writer (`threading.Lock()`); None
        where one thread runs both (simnet), which then never overlap."""
        self._view = view
        self._readers: AbstractContextManager[object] = gate if gate is not None else nullcontext()

    def publish(self, view: MixView) -> None:
        """Writer side: replace the current view (never mutate one already published)."""
        self._view = view

    def settle(self, view: MixView) -> None:
        """Writer side: publish `view` (which marks what is about to be written busy) and return once
        no mix still reads tensors through an older one. Waits at most one mix."""
        self._view = view
        with self._readers:
            pass

    @property
    def current(self) -> MixView:
        """The newest view, for its fields: tensors are read only inside `reading`."""
        return self._view

    @contextmanager
    def reading(self) -> Iterator[MixView]:
        """Reader side: the newest view, whose tensors not marked busy stay as they are until the
        block ends (keep the block to the mix: the worker waits for it before writing a copy)."""
        with self._readers:
            yield self._view


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
        self._norm: tuple[weakref.ref, int, float] | None = None
        self._distances: dict[bytes, tuple[weakref.ref, int, weakref.ref, int, float]] = {}

    def build(self, public: torch.Tensor, copies: list[CopyView], published_at: float | None,
              moves: tuple[float, ...], public_version: int = 0, busy: frozenset[bytes] = frozenset(),
              public_busy: bool = False) -> MixView:
        """A view of `public` and `copies` (their `distance` left None), with the distances filled in.
        A tensor is known by its identity and its version together (copies are written in place
        under a new version); a busy one is not read, nor is anything while x̂_i is busy."""
        if not public_busy and (self._norm is None or self._norm[0]() is not public or self._norm[1] != public_version):
            self._norm = (weakref.ref(public), public_version, safe_norm(public))
        known: dict[bytes, float] = {}
        changed = []
        for c in copies:
            m = self._distances.get(c.key)
            if m is None or m[0]() is not c.x_hat or m[1] != c.version:
                changed.append(c)
            elif m[2]() is public and m[3] == public_version:
                known[c.key] = m[4]
        readable = [] if public_busy else [c for c in changed if c.key not in busy]
        measured = safe_distances([c.x_hat for c in readable], public) if readable else []
        fresh = {c.key: (weakref.ref(c.x_hat), c.version, weakref.ref(public), public_version, d)
                 for c, d in zip(readable, measured)}
        self._distances = {c.key: m for c in copies if (m := fresh.get(c.key) or self._distances.get(c.key))}
        known.update((key, m[4]) for key, m in fresh.items())
        measured = tuple(dataclasses.replace(c, distance=None if c.key in busy else known.get(c.key)) for c in copies)
        norm = self._norm[2] if self._norm is not None else 0.0
        return MixView(public, measured, norm, published_at, moves, public_version, frozenset(busy), public_busy)
