"""Addresses whose requests keep being refused, turned away before HTTP is parsed.

A refusal (429, and the guard's other answers that blame the request) is cheap, but it is an
accepted connection, a parsed request, a middleware run and an answer, all on the event loop,
which shares the interpreter lock and the core with training: requests sent back to back,
nearly all refused, cost a victim pinned to one core about half its training steps (SECURITY.md).
So each address's refusals are rationed too (`NetConfig.refusals_per_s`, past a burst of
`refusal_burst`), and all addresses' together (`refusals_in_all_per_s`): an address out of its
budget is benched, its new connections closed as they are made and those it holds at their next
bytes (`peer.net.connection_caps`), before aiohttp sees them, until its budget refills.

The budget in all is what holds many addresses, each within its own rate: an address refused
while it is spent has spent its own. But anyone can spend it, so it benches only addresses that
have themselves been refused more than `refusal_strikes` times in `STRIKE_MEMORY_S`: an honest
peer is refused a few times at most (a restart's first contacts, a partner out of its work
budget), and its first contact during a flood is answered, not benched with the flooders. An
address's refusals are its own requests' (TCP addresses cannot be spoofed), so no one else can
collect strikes for it. An address is a budget key (`peer.core.budget_key`): an IPv6 /64, which
one host commonly holds whole, is one address, so the hosts of one /64 share its strikes and its
bench. What a flood from K addresses still gets answered: each address's strikes once, then
about one request per address each time its bench ends.

One IPv6 allocation (a /48) is 65,536 such addresses, so each /64's block (`NetConfig.ipv6_block_prefix`)
is also an address here, with `ipv6_block_share` times a /64's burst, rate and strikes, and the
same rules: every refusal counts against both, and a /64 is benched while either is. A flood
from all of a /48 gets the block's strikes once, then about one request each time the block's
bench ends, as one address with a few times the budget would; the /64s of a /48 share its
bench, as the hosts of one /64 share theirs.

Turning a connection away is cheaper than answering it, but each still wakes the event loop,
which then takes the interpreter lock from training: a flood of ~1,300 connections a second
reset as they were accepted cost as much training as ~1,000 answered with 429. So the benched
connections turned away in all are rationed too (`NetConfig.benched_connections_per_s`): past
that, accepting pauses (`turned_away`), the kernel holds or drops new connections meanwhile,
and the loop wakes a few times a second however fast they come. Connections already held go on.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from peer.core.budget_key import NO_BLOCKS, Blocks
from peer.core.token_bucket import AddressBuckets, TokenBucket
from peer.net.config import NetConfig

MAX_BENCHED_ADDRESSES = 4096
"""Addresses whose refusals are remembered; the least recent goes first (and starts afresh)."""
STRIKE_MEMORY_S = 60.0
"""How long an address's refusals count towards its strikes (they come back at `refusal_strikes`
over this long)."""


class RefusalBench:
    """Per address, refusals against a token bucket; an address out of tokens is benched."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic, *,
                 in_all_per_s: float = math.inf, turned_away_per_s: float = math.inf, strikes: int = 1,
                 blocks: Blocks = NO_BLOCKS) -> None:
        """`strikes`: refusals of an address in `STRIKE_MEMORY_S` that the budget in all never benches
        it for (`NetConfig.refusal_strikes`). `blocks`: the IPv6 blocks benched beside their /64s."""
        self.enabled = math.isfinite(rate)
        """False (`refusals_per_s` inf): nobody is ever benched."""
        self.clock = clock
        self.blocks = blocks
        rate = rate if self.enabled else 0.0
        self._buckets = AddressBuckets(rate, burst, MAX_BENCHED_ADDRESSES)
        self._strikes = AddressBuckets(strikes / STRIKE_MEMORY_S, strikes, MAX_BENCHED_ADDRESSES)
        share = blocks.share
        self._block_buckets = AddressBuckets(rate * share, burst * share, MAX_BENCHED_ADDRESSES)
        self._block_strikes = AddressBuckets(strikes * share / STRIKE_MEMORY_S, strikes * share, MAX_BENCHED_ADDRESSES)
        self._in_all_per_s = in_all_per_s
        self._in_all = TokenBucket(2 * in_all_per_s if math.isfinite(in_all_per_s) else 1.0, clock())
        self._turned_away = TokenBucket(max(1.0, turned_away_per_s) if math.isfinite(turned_away_per_s) else 1.0,
                                        clock())
        self._turned_away_per_s = turned_away_per_s

    @classmethod
    def of(cls, cfg: NetConfig) -> "RefusalBench":
        """The bench `cfg`'s budgets describe."""
        return cls(cfg.refusals_per_s, cfg.refusal_burst, in_all_per_s=cfg.refusals_in_all_per_s,
                   turned_away_per_s=cfg.benched_connections_per_s, strikes=cfg.refusal_strikes, blocks=cfg.blocks())

    def turned_away(self) -> float:
        """A benched address's connection was turned away: seconds to pause accepting (0: none), once
        more than `turned_away_per_s` (a second's worth at once) came. The pause lasts until half
        of that budget is back."""
        rate = self._turned_away_per_s
        if not math.isfinite(rate):
            return 0.0
        burst = max(1.0, rate)
        if self._turned_away.take(rate, burst, self.clock()):
            return 0.0
        return burst / 2 / rate

    def refused(self, address: str) -> None:
        """A request of `address` was refused."""
        if not self.enabled:
            return
        now, rate = self.clock(), self._in_all_per_s
        in_all = not math.isfinite(rate) or self._in_all.take(rate, 2 * rate, now)
        _charge(self._buckets, self._strikes, address, in_all, now)
        block = self.blocks.of(address)
        if block is not None:
            _charge(self._block_buckets, self._block_strikes, block, in_all, now)

    def benched(self, address: str) -> bool:
        """Whether `address`'s connections are to be closed unread now: it, or its block, is out of budget."""
        if not self.enabled:
            return False
        now = self.clock()
        if not self._buckets.has(address, now):
            return True
        block = self.blocks.of(address)
        return block is not None and not self._block_buckets.has(block, now)


def _charge(buckets: AddressBuckets, strikes: AddressBuckets, key: str, in_all: bool, now: float) -> None:
    """One refusal of `key` (an address or a block): one token, or, past its strikes while the budget
    in all is spent (`in_all` False), enough to bench it at once."""
    repeated = not strikes.take(key, now)  # past its first few refusals
    buckets.charge(key, now, 2 * buckets.burst if repeated and not in_all else 1.0)
