"""How often an address may send us exchanges that hold no ticket of ours (first contacts).

Every exchange request costs the node worker a signature check and a signed answer, and a
ticketless one buys its sender only a ticket: a stranger can send them without end, for
nothing in return, from each address it has. So ticketless requests are charged, after the
fact, to a token bucket of their address (`first_contact_every_s`, up to `BURST` at once) and
to one of all addresses together (`first_contacts_per_s`). An address whose bucket is empty is
refused (429) before its body is looked at; while the total is empty, so is every address that
sent a ticketless request lately (its bucket not full). An honest peer sends one first contact
per pair (and after a restart), then exchanges with tickets, which cost its address nothing.
Pure: the caller passes a monotonic `now`.
"""

from __future__ import annotations

from collections import OrderedDict

BURST = 4.0
"""Ticketless requests one address may send at once (peers starting together behind one address)."""
MAX_ADDRESSES = 4096
"""Addresses whose bucket is remembered; the least recent goes first (and starts full again)."""


class FirstContactLimited(RuntimeError):
    """Refused before reading: this address (or all together) sent too many ticketless requests."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason


class FirstContacts:
    def __init__(self, every_s: float, per_s: float, now: float) -> None:
        if not (every_s > 0 and per_s > 0):
            raise ValueError(f"first_contact_every_s and first_contacts_per_s must be > 0, got {every_s}, {per_s}")
        self.rate, self.total_rate, self.total_burst = 1.0 / every_s, per_s, 2.0 * per_s
        self._total, self._total_at = self.total_burst, now
        self._by_address: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, at)

    def _tokens(self, address: str, now: float) -> float:
        tokens, at = self._by_address.get(address, (BURST, now))
        return min(BURST, tokens + max(0.0, now - at) * self.rate)

    def _refill_total(self, now: float) -> None:
        self._total = min(self.total_burst, self._total + max(0.0, now - self._total_at) * self.total_rate)
        self._total_at = max(self._total_at, now)

    def check(self, address: str, now: float) -> None:
        """FirstContactLimited when a request from `address` must be refused unread."""
        tokens = self._tokens(address, now)
        if tokens < 1:
            raise FirstContactLimited("first_contact_rate", f"one ticketless exchange per {1 / self.rate:g} s per address")
        self._refill_total(now)
        if self._total < 1 and tokens < BURST:
            raise FirstContactLimited("first_contacts_busy", "too many ticketless exchanges from all addresses")

    def record(self, address: str, ticketed: bool, now: float) -> None:
        """An exchange from `address` was served: a ticketless one is charged."""
        if ticketed:
            return
        self._by_address[address] = (self._tokens(address, now) - 1, now)
        self._by_address.move_to_end(address)
        while len(self._by_address) > MAX_ADDRESSES:
            self._by_address.popitem(last=False)
        self._refill_total(now)
        self._total -= 1
