"""Token buckets, alone and one per address: how a peer rations what strangers can make it spend.

Pure: every call is given the time. Used for snapshots in answers (`peer.core.snapshots`), and for
exchanges (`peer.net.http_guard`): those that spend no ticket of ours, and the work of every
exchange per key and per address. Keys are any strings: an address, or a peer id; `BlockBuckets`
keeps an address's budget beside its IPv6 block's (`peer.core.budget_key.Blocks`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from peer.core.budget_key import Blocks


@dataclass
class TokenBucket:
    tokens: float
    at: float
    """When `tokens` was last brought up to date."""

    def refill(self, rate: float, burst: float, now: float) -> None:
        """At `rate` a second since the last refill, up to `burst` (an infinite rate: always full)."""
        elapsed = max(0.0, now - self.at)
        self.tokens = burst if math.isinf(rate) else min(burst, self.tokens + elapsed * rate)
        self.at = max(self.at, now)

    def take(self, rate: float, burst: float, now: float, cost: float = 1.0) -> bool:
        """Refill, then, if there is a whole token, take `cost` (`charge`)."""
        self.refill(rate, burst, now)
        if self.tokens < 1:
            return False
        self.charge(cost, burst)
        return True

    def wait(self, rate: float) -> float:
        """Seconds until a whole token is back, at `rate` a second (as of the last refill)."""
        if self.tokens >= 1:
            return 0.0
        return math.inf if rate <= 0 else (1 - self.tokens) / rate

    def charge(self, cost: float, burst: float) -> None:
        """Take `cost` whatever is left, down to a debt of one `burst` at most: a dearer request, or
        one charged once its work is known, leaves a debt the rate pays back before the next passes."""
        self.tokens = max(-burst, self.tokens - cost)


class AddressBuckets:
    """One bucket per address, each starting full at `burst`; at most `max_addresses` remembered
    (the least recently used is forgotten first, and starts full again if it comes back), so
    however many addresses an attacker speaks from, the map stays bounded."""

    def __init__(self, rate: float, burst: float, max_addresses: int) -> None:
        if not (rate >= 0 and burst >= 1 and max_addresses >= 1):
            raise ValueError(f"need rate >= 0, burst >= 1 and max_addresses >= 1, got {rate}, {burst}, {max_addresses}")
        self.rate, self.burst, self.max_addresses = rate, float(burst), max_addresses
        self._by_address: OrderedDict[str, TokenBucket] = OrderedDict()

    def bucket(self, address: str, now: float) -> TokenBucket:
        """`address`'s bucket, refilled to `now` (made full if it was not remembered)."""
        bucket = self._by_address.get(address)
        if bucket is None:
            bucket = self._by_address[address] = TokenBucket(self.burst, now)
            while len(self._by_address) > self.max_addresses:
                self._by_address.popitem(last=False)
        self._by_address.move_to_end(address)
        bucket.refill(self.rate, self.burst, now)
        return bucket

    def has(self, address: str, now: float) -> bool:
        """Whether `address` has a token left (taking none)."""
        return self.bucket(address, now).tokens >= 1

    def take(self, address: str, now: float, cost: float = 1.0) -> bool:
        """Take `cost` of `address`'s tokens if it has a whole one (`TokenBucket.take`)."""
        return self.bucket(address, now).take(self.rate, self.burst, now, cost)

    def wait(self, address: str, now: float) -> float:
        """Seconds from `now` until `address` has a whole token again (`TokenBucket.wait`)."""
        return self.bucket(address, now).wait(self.rate)

    def charge(self, address: str, now: float, cost: float) -> None:
        """Take `cost` of `address`'s tokens whatever it has left (`TokenBucket.charge`)."""
        self.bucket(address, now).charge(cost, self.burst)

    def __len__(self) -> int:
        return len(self._by_address)


class BlockBuckets:
    """`AddressBuckets` per budget key, and beside them per IPv6 block (`Blocks`) at `share` times
    the rate and burst: a request passes only where both have room, and is charged to both, so
    the /64s of one allocation together get `share` /64s' budgets. Both maps are bounded alike;
    a key with no block (IPv4, "?") has its own bucket alone."""

    def __init__(self, rate: float, burst: float, max_addresses: int, blocks: Blocks) -> None:
        self.blocks = blocks
        self.addresses = AddressBuckets(rate, burst, max_addresses)
        self.wide = AddressBuckets(rate * blocks.share, burst * blocks.share, max_addresses)
        """One bucket per block."""

    def _levels(self, address: str) -> list[tuple[AddressBuckets, str]]:
        block = self.blocks.of(address)
        return [(self.addresses, address)] + ([(self.wide, block)] if block is not None else [])

    def has(self, address: str, now: float) -> bool:
        """Whether `address` and its block each have a token left (taking none)."""
        return all(buckets.has(key, now) for buckets, key in self._levels(address))

    def take(self, address: str, now: float, cost: float = 1.0) -> bool:
        """Take `cost` from `address` and its block if each has a whole token (`TokenBucket.take`)."""
        if not self.has(address, now):
            return False
        self.charge(address, now, cost)
        return True

    def wait(self, address: str, now: float) -> float:
        """Seconds from `now` until `address` and its block each have a whole token again."""
        return max(buckets.wait(key, now) for buckets, key in self._levels(address))

    def charge(self, address: str, now: float, cost: float) -> None:
        """Take `cost` from `address` and its block whatever they have left (`TokenBucket.charge`)."""
        for buckets, key in self._levels(address):
            buckets.charge(key, now, cost)
