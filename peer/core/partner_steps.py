"""The node's half of partner steps (async_opt.partner_steps): what it sends and what it takes.

Sending: the training thread hands each publish copy with `outside`, the sum of what mixing
and partners' steps added since the previous hand-over (`peer.boundary`), so our own steps
are x − (x at our last publish) − outside. They travel compressed in the update frame
(`protocol.messages.STEP_TENSOR`) with their own error feedback, so nothing the codec leaves
out is lost, only late.

Taking: a partner's steps count only once we have chosen it. Those arriving in the answer to
our own exchange with it are taken at once; those it pushed at us in between wait (one
parameter-sized sum per neighbour we have pulled before) and are taken at our next pull of
it. A neighbour we never pulled moves nothing, whatever it pushes. What is taken goes,
bounded, to the `StepInbox`, which the training thread drains at its next step boundary.

Owned by the node's thread, like `GossipNode`; only `StepInbox.take` is the training thread's.
No locks (peer/core imports no threading): the inbox is a deque, whose append and popleft are atomic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from async_opt.partner_steps import OwnStepNorms, bounded_sum
from async_opt.mixing import safe_norm


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


@dataclass
class _Waiting:
    steps: torch.Tensor | None = None
    since_seq: int = 0
    """Our public seq when we last took this neighbour's steps (or first heard of it)."""


class PartnerSteps:
    """Own steps out, partners' steps in; see the module docstring."""

    def __init__(self, weight: float, clip_multiplier: float, window: int, waiting: int = 8,
                 power: float = 1.0) -> None:
        """`waiting`: sums the inbox holds for the training thread at most (one per neighbour);
        `power`: how a sum past the bound is shortened (`GossipConfig.clip_power`)."""
        self.weight, self.power = weight, power
        self.norms = OwnStepNorms(window, clip_multiplier)
        self.inbox = StepInbox(waiting)
        self._residual: torch.Tensor | None = None
        self._waiting: dict[bytes, _Waiting] = {}

    @property
    def enabled(self) -> bool:
        return self.weight > 0.0

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
        """Keep what the codec left out of `carried` for the next frame (error feedback)."""
        self._residual = carried.sub_(reconstruction)

    # ------------------------------------------------------------------ taking
    def received(self, key: bytes, steps: torch.Tensor, *, pulled: bool, chosen_before: bool, seq: int) -> None:
        """A verified update frame of `key` carried `steps`: keep them if we chose (or now pull) it."""
        if not self.enabled or not (pulled or chosen_before):
            return
        w = self._waiting.get(key)
        if w is None:
            w = self._waiting[key] = _Waiting(since_seq=seq)
        w.steps = steps.clone() if w.steps is None else w.steps.add_(steps)

    def take_from(self, key: bytes, seq: int) -> tuple[bool, bool]:
        """Our pull of `key` was answered: hand its waiting steps, bounded, to the inbox.
        Returns (whether something was handed over, whether it was shortened to the bound)."""
        w = self._waiting.get(key)
        if w is None:
            self._waiting[key] = _Waiting(since_seq=seq)
            return False, False
        steps, bound = w.steps, self.norms.bound(seq - w.since_seq)
        w.steps, w.since_seq = None, seq
        if steps is None:
            return False, False
        add, shortened = bounded_sum(steps, bound, self.weight, self.power)
        if add is not None:
            self.inbox.add(add)
        return add is not None, shortened

    def forget(self, key: bytes) -> None:
        """The neighbour is gone, or began a new run: what it sent before no longer counts."""
        self._waiting.pop(key, None)

    def reset(self) -> None:
        """We start afresh from an adopted state: nothing sent or received before applies."""
        self._residual = None
        self._waiting.clear()
        self.norms.clear()
        self.inbox.clear()
