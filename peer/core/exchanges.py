"""Which neighbour to exchange with next, and which exchanges still hold a slot.

Part of the session's decisions (`peer.core.session`), kept apart because it is the one
place that weighs partners against each other. Partners are sticky: up to `max_partners`
verified neighbours we start exchanges with, so the neighbour copies we hold stay stable
instead of costing a full snapshot for every new pair. At most `max_in_flight` exchanges
hold a slot, never two with one neighbour; one open longer than a few smoothed round trips
stalls and frees its slot (it still waits for its answer or timeout), and at most
`max_partners` are open in all. Behind a partition most partners may sit across the cut:
each stalls in turn, and the ones left free are those on our side. A partner whose
exchange failed is replaced, first by a verified peer whose last request succeeded.
Pure and single-owner, like the session. See docs/architecture.md.
"""

from __future__ import annotations

import random

from peer.core.config import SessionConfig
from peer.core.table import NeighbourTable


class Exchanges:
    """The partner set and the exchanges in flight (token -> address)."""

    def __init__(self, cfg: SessionConfig, rtt_smoothing: float) -> None:
        self.cfg = cfg
        self.rtt_smoothing = rtt_smoothing
        self.partners: list[str] = []
        self.in_flight: dict[int, str] = {}
        self._started: dict[int, float] = {}
        self._rtt_s: float | None = None  # smoothed round trip of our exchanges, any partner

    def stalled(self, now: float) -> list[int]:
        """Tokens of exchanges open so long they no longer hold an in-flight slot."""
        limit = self.cfg.stall_min_s
        if self._rtt_s is not None:
            limit = max(limit, self.cfg.stall_rtt_factor * self._rtt_s)
        return [t for t, started in self._started.items() if now - started >= limit]

    def slot_free(self, now: float) -> bool:
        """Fewer than `max_in_flight` open and not stalled, and fewer than `max_partners` open."""
        active = len(self.in_flight) - len(self.stalled(now))
        return active < self.cfg.max_in_flight and len(self.in_flight) < self.cfg.max_partners

    def choose(self, table: NeighbourTable, rng: random.Random) -> str | None:
        """A verified, live partner not already in an exchange (vacancies filled first)."""
        healthy: set[str] = set()
        verified: set[str] = set()
        for p in table.live():
            h = table.health(p.address)
            if h is not None and h.last_success is not None:
                verified.add(p.address)
                if h.failures == 0:
                    healthy.add(p.address)
        self.partners = [a for a in self.partners if a in verified]
        for eligible in (healthy, verified):
            pool = sorted(eligible - set(self.partners))
            while len(self.partners) < self.cfg.max_partners and pool:
                self.partners.append(pool.pop(rng.randrange(len(pool))))
        busy = set(self.in_flight.values())
        free = [a for a in self.partners if a not in busy]
        return rng.choice(free) if free else None

    def start(self, token: int, address: str, now: float) -> None:
        self.in_flight[token] = address
        self._started[token] = now

    def finish(self, token: int, failed: bool, rtt: float | None = None) -> str | None:
        """Close `token`; returns its address (None if unknown). A failed partner is dropped."""
        address = self.in_flight.pop(token, None)
        self._started.pop(token, None)
        if address is None:
            return None
        if failed and address in self.partners:  # replaced at the next choice
            self.partners.remove(address)
        if not failed and rtt is not None and rtt >= 0:
            a = self.rtt_smoothing
            self._rtt_s = rtt if self._rtt_s is None else (1 - a) * self._rtt_s + a * rtt
        return address
