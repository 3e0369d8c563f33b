"""The control frame that opens each half of an exchange: what it says, built and read.

A request's control frame (A to B) spends a ticket B issued to A (`protocol.replay`) and
brings two tickets of A's own: `reply`, which B's answer must spend (so no other answer,
recorded or relayed, is taken for it), and `offer`, which B keeps for its next request to A.
The answer's control frame spends `reply` and brings an `offer` for A's next request.
`bundle` binds the frames after the control frame (`protocol.bundle_digest`). A hostile
sender may claim anything, so every field present is checked for type and range here; an
absent one means none (no ticket, nothing held, no frames bound).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from peer.core.addresses import MAX_LISTEN_CHARS, valid_listen
from protocol import (
    FrameHeader, FrameKind, FrameRefused, Identity, Limits, RefusalReason, bundle_digest, make_control_frame,
)

MAX_HELD_TICKETS = 1024
"""Peers whose latest ticket we keep (far more than we exchange with); the least recent goes first."""
_MAX_INT = (1 << 63) - 1
_DIGEST = re.compile(r"[0-9a-f]{32}")
_NOTHING_BOUND = bundle_digest([])


@dataclass(frozen=True)
class Control:
    """The `extra` of an exchange's control frame."""

    epoch: int
    """The sender's epoch: its public copy's run, and the epoch its tickets belong to."""
    listen: str
    """Where the sender says it listens (a hint: a candidate until dialled)."""
    have_epoch: int
    """Our epoch whose public copy the sender holds (0: none)."""
    have_seq: int
    """The last seq of ours it holds (-1: nothing)."""
    offer: int
    """A ticket for the receiver's next request to the sender (0: none)."""
    reply: int
    """The ticket the answer to this request must spend (0 in an answer)."""
    bundle: str
    """`bundle_digest` of the frames after this one."""

    def to_extra(self) -> dict[str, Any]:
        return asdict(self)


def _int(extra: dict[str, Any], key: str, low: int) -> int:
    value = extra.get(key, low)  # absent: the lowest value, which means none in every field
    if type(value) is not int or not low <= value <= _MAX_INT:
        raise FrameRefused(RefusalReason.BAD_HEADER, f"control field {key} must be an int in [{low}, 2**63)")
    return value


def read_control(header: FrameHeader) -> Control:
    """The control fields of a verified frame; FrameRefused(BAD_HEADER) for anything else."""
    if header.kind != FrameKind.ACK:
        raise FrameRefused(RefusalReason.BAD_HEADER, "an exchange must start with a control frame")
    extra = header.extra
    listen, bundle = extra.get("listen", ""), extra.get("bundle", _NOTHING_BOUND)
    if not valid_listen(listen):
        raise FrameRefused(RefusalReason.BAD_HEADER,
                           f"control field listen must be \"\" or HOST:PORT of at most {MAX_LISTEN_CHARS} characters")
    if not isinstance(bundle, str) or _DIGEST.fullmatch(bundle) is None:
        raise FrameRefused(RefusalReason.BAD_HEADER, "control field bundle must be 32 lowercase hex digits")
    return Control(epoch=_int(extra, "epoch", 0), listen=listen, have_epoch=_int(extra, "have_epoch", 0),
                   have_seq=_int(extra, "have_seq", -1), offer=_int(extra, "offer", 0),
                   reply=_int(extra, "reply", 0), bundle=bundle)


def make_control(identity: Identity, control: Control, *, swarm: str, fingerprint: str, seq: int, step: int,
                 now: float, to: bytes, to_epoch: int, ticket: int, limits: Limits) -> bytes:
    """Sign a control frame addressed to `to` (b"": a first contact whose key we do not know yet)."""
    return make_control_frame(identity, kind=FrameKind.ACK, swarm=swarm, fingerprint=fingerprint, seq=seq, step=step,
                              timestamp=now, extra=control.to_extra(), limits=limits, to=to, to_epoch=to_epoch,
                              ticket=ticket)


class HeldTickets:
    """Tickets other peers issued us, each good for our next request to that peer.

    Kept apart from the neighbour copies (a few, each a model-sized tensor), so that dropping
    a copy does not cost the next push; bounded, so a flood of keys costs at most a push each."""

    def __init__(self, limit: int = MAX_HELD_TICKETS) -> None:
        self.limit = limit
        self._held: OrderedDict[bytes, tuple[int, int]] = OrderedDict()  # peer -> (its epoch, ticket)

    def __len__(self) -> int:
        return len(self._held)

    def keep(self, peer: bytes, epoch: int, ticket: int, *, replace: bool = True) -> None:
        """The newest ticket `peer` (in `epoch`) gave us; 0 gives nothing. Without `replace`
        (a frame that may be a recording) it is kept only where we hold none for `peer`."""
        if ticket and (replace or peer not in self._held):
            self._held[peer] = (epoch, ticket)
            self._held.move_to_end(peer)
            while len(self._held) > self.limit:
                self._held.popitem(last=False)

    def get(self, peer: bytes | None) -> tuple[int, int]:
        """(its epoch, the ticket) we hold for `peer`, or (0, 0)."""
        return self._held.get(peer, (0, 0)) if peer else (0, 0)

    def take(self, peer: bytes | None) -> tuple[int, int]:
        """As `get`, and forget it: a ticket is good for one request."""
        return self._held.pop(peer, (0, 0)) if peer else (0, 0)
