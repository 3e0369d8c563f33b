"""Token buckets, alone and one per address: how a peer rations what strangers can make it spend.

Pure: every call is given the time. Used for snapshots in answers (`peer.core.snapshots`) and for
exchanges that spend no ticket of ours (`peer.net.http_guard`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass


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

    def take(self, rate: float, burst: float, now: float) -> bool:
        """Refill, then take one if there is one."""
        self.refill(rate, burst, now)
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


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

    def take(self, address: str, now: float) -> bool:
        """Take one of `address`'s tokens if it has one."""
        return self.bucket(address, now).take(self.rate, self.burst, now)

    def __len__(self) -> int:
        return len(self._by_address)
