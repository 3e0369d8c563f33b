"""Exact snapshots of our public copy: signed once and reused, and rationed in answers to others.

A snapshot is the model's size (4 bytes a parameter), and a request that asks for one costs
its sender a few hundred bytes. Our own requests go to partners our session chose, and carry
one wherever the gap calls for it. An answer (to a request another peer started) carries one
only where (`AnswerBudget.withheld`): the request spent a ticket of ours (a first contact gets
a ticket and no frames), the asker's key is one whose listen address our session verified
(dialled, and a hello signed by that key over our nonce came back: `peer.core.session`), and
token buckets have a snapshot left: one per asking address (the driver's budget key for it: an
IPv6 /64 is one address, `peer.core.budget_key`), one per IPv6 block it lies in (a /48, at a few
/64s' worth: `budget_key.SITE_BLOCKS`; one allocation is 65,536 /64s, each drawing a snapshot
otherwise), and one for all together.
Withheld snapshots are counted by reason (`snapshots_withheld_total{reason}`); the asker
learns nothing but that its copy of ours is still missing, and asks again next exchange.
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from peer.core.budget_key import SITE_BLOCKS, Blocks
from peer.core.ingest import FRAME_OVERHEAD
from peer.core.token_bucket import BlockBuckets, TokenBucket
from protocol import Identity, make_snapshot_frame


def snapshot_bytes(numel: int, with_steps: bool, dtype: torch.dtype = torch.float32) -> int:
    """What a snapshot frame of a `numel`-parameter model held in `dtype` takes on the wire: one
    exact vector, two fp32 ones with its sender's steps sum (`peer.core.partner_steps`), and the
    frame's own bytes. At float32 (the default) the most an honest one takes: transfer deadlines
    grow with it (`SessionConfig.transfer_deadline_s`)."""
    if with_steps:
        return 2 * 4 * numel + FRAME_OVERHEAD
    return (2 if dtype == torch.bfloat16 else 4) * numel + FRAME_OVERHEAD


SNAPSHOT_REUSE_S = 60.0
"""How long one signed snapshot of a public copy is sent again (well inside the clock-skew limit)."""
MAX_ASKING_ADDRESSES = 4096
"""Addresses, and blocks, whose snapshot buckets are remembered; the least recent goes first (and starts
full again)."""


class SnapshotCache:
    """Our public copy as one signed frame, built once per (epoch, seq) and reused: it names no
    receiver (the control frame binds it by its signature), so sending it again costs bandwidth,
    not a parameter-sized compression and signature. Rebuilt after SNAPSHOT_REUSE_S, so a peer
    whose training stalled never sends a stale stamp."""

    def __init__(self) -> None:
        self._cache: tuple[int, int, float, bytes] | None = None  # (epoch, seq, built at, frame)

    def frame(self, identity: Identity, *, swarm: str, fingerprint: str, epoch: int, seq: int, step: int,
              x_hat: torch.Tensor, now: float, steps: torch.Tensor | None = None) -> bytes:
        """`steps`: our own steps sum at `seq` (peer.core.partner_steps), carried beside `x_hat`."""
        c = self._cache
        if c is None or (c[0], c[1]) != (epoch, seq) or not 0 <= now - c[2] <= SNAPSHOT_REUSE_S:
            frame = make_snapshot_frame(identity, swarm=swarm, fingerprint=fingerprint, seq=seq, step=step,
                                        timestamp=now, vector=x_hat, steps=steps, extra={"epoch": epoch})
            c = self._cache = (epoch, seq, now, frame)
        return c[3]

    @property
    def held(self) -> bool:
        """Whether a signed frame is held (the model's size in bytes)."""
        return self._cache is not None

    def forget(self) -> None:
        """Our public copy moved on (a publish, an adoption): the frame can never be sent again,
        and it is the model's size, so it goes now rather than at the next snapshot sent."""
        self._cache = None


class AnswerBudget:
    """Whether an answer may carry our snapshot; see the module docstring. Pure: the caller passes
    the time. Buckets count snapshots (each the model's size), so bytes are bounded by the count."""

    def __init__(self, every_s: float, per_min: float, burst: int, now: float, *, blocks: Blocks = SITE_BLOCKS) -> None:
        """`blocks`: the IPv6 blocks rationed beside their /64s; the node reads no network settings, so
        it keeps the default ones (`NetConfig.ipv6_block_prefix` does not reach them)."""
        self.rate, self.burst = per_min / 60.0, float(burst)
        self._total = TokenBucket(self.burst, now)
        self._by_address = BlockBuckets(1.0 / every_s, 1.0, MAX_ASKING_ADDRESSES, blocks)

    def withheld(self, sender: bytes, *, ticketed: bool, verified: Collection[bytes], address: str,
                 now: float, gap_fill: bool = False) -> str | None:
        """Why the answer to `sender` (asking from `address`) carries no snapshot, or None: send it.

        `gap_fill`: the asker holds our copy of this epoch and we hold every update it lacks; the
        snapshot only replaces them because it is the smaller (or the gap is long). It costs no
        more than the updates an honest neighbour is owed, so only the ticket and the verified
        address are asked of it, not the buckets, which ration first copies to new keys."""
        if not ticketed:
            return "unticketed"
        if sender not in verified:
            return "unverified"
        if gap_fill:
            return None
        if not self._by_address.has(address, now):  # the address, or its block: taken once the total has one too
            return "address_budget"
        if not self._total.take(self.rate, self.burst, now):
            return "budget"
        self._by_address.charge(address, now, 1.0)
        return None
