"""The node's half of partner steps (async_opt.partner_steps): what it sends and what it takes.

Sending: the training thread hands each publish copy with `outside`, the sum of what mixing
and partners' steps added since the previous hand-over (`peer.boundary`), so our own steps
are x − (x at our last publish) − outside. They travel compressed in the update frame
(`protocol.messages.STEP_TENSOR`) with their own error feedback, so nothing the codec leaves
out is lost, only late.

Every frame we publish adds its steps' reconstruction to `published`, the sum of our own steps
since our run began as receivers rebuild it; a snapshot of our public copy carries that sum too,
so a receiver's copy of it (`NeighbourCopy.steps_hat`) survives a gap filled by a snapshot.

Taking: a partner's steps count only once we have chosen it. At each answer to our own exchange
with a partner we take the difference between its steps sum now and at our previous pull of it,
which holds the steps it pushed at us in between; the first pull only marks where to start. A
neighbour we never pulled moves nothing, whatever it pushes. What is taken goes, bounded, to the
`StepInbox`, which the training thread drains at its next step boundary.

Owned by the node's thread, like `GossipNode`; only `StepInbox.take` is the training thread's.
No locks (peer/core imports no threading): the inbox is a deque, whose append and popleft are atomic.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import torch

from async_opt.partner_steps import OwnStepNorms, bounded_sum
from async_opt.mixing import safe_norm
from peer.core.cadence import PublishPeriod


class StepInbox:
    """Partner steps waiting for the training thread: the node's thread appends, the training
    thread takes their sum. A deque's append and popleft are atomic, so neither side locks or
    waits; at most `capacity` sums wait (a training thread that stalls loses the oldest)."""

    def __init__(self, capacity: int) -> None:
        self._queue: deque[torch.Tensor] = deque(maxlen=capacity)
        self.dropped = 0
        """Sums pushed out unapplied because the queue was full (a count, for metrics and tests)."""

    def add(self, steps: torch.Tensor) -> None:
        """Node thread: queue `steps` (a tensor the caller no longer uses)."""
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(steps)

    def take(self) -> torch.Tensor | None:
        """Training thread: the sum of everything queued since the last take, or None."""
        total = None
        while True:
            try:
                steps = self._queue.popleft()
            except IndexError:
                return total
            total = steps if total is None else total.add_(steps)

    def clear(self) -> None:
        self._queue.clear()


@dataclass(frozen=True)
class _Taken:
    steps_hat: torch.Tensor
    """The partner's steps sum when we last took from it (a tensor its copy never writes into again)."""
    seq: int
    """Our public seq then: the bound grows with the publish periods since."""


class PartnerSteps:
    """Own steps out, partners' steps in; see the module docstring."""

    def __init__(self, weight: float, clip_multiplier: float, window: int, waiting: int = 8,
                 power: float = 1.0, period: PublishPeriod | None = None) -> None:
        """`waiting`: sums the inbox holds for the training thread at most (one per neighbour);
        `power`: how a sum past the bound is shortened (`GossipConfig.clip_power`);
        `period`: our measured steps per publish, which `weight` is then per
        (`GossipConfig.per_period`); None: per step."""
        self.base_weight, self.power = weight, power
        self._period = period
        self.norms = OwnStepNorms(window, clip_multiplier)
        self.inbox = StepInbox(waiting)
        self._residual: torch.Tensor | None = None
        self.published: torch.Tensor | None = None
        """Our own steps summed over every frame we published in this run, as receivers rebuild
        them (None until the first); our snapshots carry it."""
        self._taken: dict[bytes, _Taken] = {}

    @property
    def enabled(self) -> bool:
        return self.base_weight > 0.0

    @property
    def weight(self) -> float:
        """What a pulled partner's steps weigh in ours now."""
        return self.base_weight if self._period is None else self.base_weight / self._period.steps()

    def taken(self) -> StepInbox | None:
        """The inbox the training thread's step boundary drains; None when partner steps are off
        (the boundary then tracks nothing for them)."""
        return self.inbox if self.enabled else None

    # ------------------------------------------------------------------ sending
    def to_send(self, x: torch.Tensor, last_x: torch.Tensor, outside: torch.Tensor | None) -> torch.Tensor | None:
        """What the next update frame carries as our steps (residual included), or None when
        partner steps are off or the caller could not say what came from outside."""
        if not self.enabled or outside is None:
            return None
        own = x - last_x
        own.sub_(outside)
        self.norms.observe(safe_norm(own))
        if self._residual is not None:
            own.add_(self._residual)
        return own

    def sent(self, carried: torch.Tensor, reconstruction: torch.Tensor) -> None:
        """Keep what the codec left out of `carried` for the next frame (error feedback), and
        add what receivers rebuild to `published`."""
        self._residual = carried.sub_(reconstruction)
        if self.published is None:
            self.published = reconstruction.clone()
        else:  # in place: only `for_snapshot` reads it, on this thread, into a frame built at once
            self.published.add_(reconstruction)

    def for_snapshot(self, numel: int) -> torch.Tensor | None:
        """The steps sum a snapshot of our public copy carries (zeros before our first
        publish), or None when partner steps are off or the sum overflowed (only a peer whose
        steps are lies gets there; receivers void their copy of its sum alike)."""
        if not self.enabled:
            return None
        if self.published is None:
            return torch.zeros(numel)
        return self.published if math.isfinite(safe_norm(self.published)) else None

    # ------------------------------------------------------------------ taking
    def take_from(self, key: bytes, steps_hat: torch.Tensor | None, seq: int) -> tuple[bool, bool]:
        """Our pull of `key` was answered, and its copy's steps sum is now `steps_hat`: hand what
        it stepped since our previous pull, bounded, to the inbox. Returns (whether something was
        handed over, whether it was shortened to the bound)."""
        if not self.enabled or steps_hat is None:
            return False, False
        before, self._taken[key] = self._taken.get(key), _Taken(steps_hat, seq)
        if before is None or before.steps_hat is steps_hat:
            return False, False
        add, shortened = bounded_sum(steps_hat - before.steps_hat, self.norms.bound(seq - before.seq),
                                     self.weight, self.power)
        if add is not None:
            self.inbox.add(add)
        return add is not None, shortened

    def forget(self, key: bytes) -> None:
        """The neighbour is gone, or began a new run: what it sent before no longer counts."""
        self._taken.pop(key, None)

    def reset(self) -> None:
        """We start afresh from an adopted state: nothing sent or received before applies."""
        self._residual = self.published = None
        self._taken.clear()
        self.norms.clear()
        self.inbox.clear()
