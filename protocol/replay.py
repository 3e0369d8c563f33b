"""Replay protection: single-use tickets that a receiver issues and a frame must spend.

A frame that changes its receiver's state names that receiver (`to`), the receiver's
current `epoch` (drawn at random when its process starts) and a `ticket` the receiver
issued to the frame's signer. Each ticket is accepted once. A recording therefore dies
with the process it was made for (a new epoch after a restart) and, within one process,
with its first use; an attacker may claim any epoch or ticket, and only the receiver's own
book decides.

The book is one fixed ring for the whole receiver, not an entry per sender: ticket n
lives in slot n mod `window` until the `window`-th ticket issued after it overwrites it.
What leaves the ring is refused, never forgotten into acceptance (the failure of a
per-sender window that evicts senders under pressure); an honest holder of an expired
ticket is answered with a fresh one and is heard on its next exchange.
Not thread-safe: a book belongs to the thread that owns the node.
"""

from __future__ import annotations

import hashlib
from array import array

from .errors import FrameRefused, RefusalReason
from .header import FrameHeader

__all__ = ["TicketBook", "epoch_from", "next_epoch", "DEFAULT_TICKET_WINDOW", "MAX_EPOCH"]

DEFAULT_TICKET_WINDOW = 1 << 14
"""Tickets live until this many more were issued (two 8-byte words each: 256 KiB)."""
MAX_EPOCH = (1 << 62) - 1
"""Epochs lie in [1, MAX_EPOCH] (`next_epoch` wraps), well inside a header's integers."""
_TAG_PERSON = b"gossip-tts/tkt"
_ANYONE = 0


def epoch_from(entropy: bytes) -> int:
    """An epoch in [1, MAX_EPOCH] from random bytes (the caller draws them: this module draws nothing)."""
    if len(entropy) < 8:
        raise ValueError("an epoch needs at least 8 bytes of entropy")
    value = int.from_bytes(hashlib.blake2b(entropy, digest_size=8).digest(), "big") & MAX_EPOCH
    return value or 1


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (a peer that adopts a new state starts one), wrapping inside [1, MAX_EPOCH]."""
    return epoch % MAX_EPOCH + 1


def _holder_tag(key: bytes | None) -> int:
    """What a ticket remembers of its holder: 8 bytes of a hash of the key, 0 for anyone."""
    if key is None:
        return _ANYONE
    tag = int.from_bytes(hashlib.blake2b(bytes(key), digest_size=8, person=_TAG_PERSON).digest(), "big")
    return tag or 1


class TicketBook:
    """Issues tickets (`issue`) and admits frames that spend one (`refusal`, `spend`)."""

    def __init__(self, owner: bytes, epoch: int, window: int = DEFAULT_TICKET_WINDOW) -> None:
        if not isinstance(owner, bytes) or len(owner) != 32:
            raise ValueError("owner must be a 32-byte public key")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive int, got {window!r}")
        self.owner = owner
        self.window = window
        self.epoch = 0
        self.renew(epoch)
        self.issued = 0
        """Tickets issued so far in this process; the newest is this number."""
        self._tickets = array("Q", bytes(8 * window))  # slot -> the live ticket number there, 0: none
        self._holders = array("Q", bytes(8 * window))  # slot -> holder tag

    def renew(self, epoch: int) -> None:
        """Move to a new epoch: every ticket issued before is void."""
        if type(epoch) is not int or not 1 <= epoch <= MAX_EPOCH:
            raise ValueError(f"epoch must be an int in [1, {MAX_EPOCH}], got {epoch!r}")
        if epoch == self.epoch:
            raise ValueError("a new epoch must differ from the current one")
        self.epoch = epoch

    def issue(self, holder: bytes | None) -> int:
        """A fresh ticket that only a frame signed by `holder` may spend (None: any signer)."""
        self.issued += 1
        slot = self.issued % self.window
        self._tickets[slot] = self.issued
        self._holders[slot] = _holder_tag(holder)
        return self.issued

    def refusal(self, header: FrameHeader) -> RefusalReason | None:
        """Why this verified header may not change our state; None when it holds a live ticket of ours."""
        if header.to and header.to != self.owner:
            return RefusalReason.WRONG_RECEIVER
        if not header.to or header.ticket == 0:
            return RefusalReason.NO_TICKET
        if header.to_epoch != self.epoch:
            return RefusalReason.STALE_EPOCH
        slot = header.ticket % self.window
        if self._tickets[slot] != header.ticket or self._holders[slot] not in (_ANYONE, _holder_tag(header.sender)):
            return RefusalReason.STALE_TICKET  # spent, overwritten, never issued, or issued to another key
        return None

    def spend(self, header: FrameHeader) -> None:
        """Use up the ticket `header` holds; FrameRefused(reason) when `refusal` names one."""
        reason = self.refusal(header)
        if reason is not None:
            raise FrameRefused(reason, f"ticket {header.ticket} of epoch {header.to_epoch} "
                                       f"from {header.sender.hex()[:16]}...")
        self._tickets[header.ticket % self.window] = 0
