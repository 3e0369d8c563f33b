"""Which neighbour to exchange with next, and which exchanges still hold a slot.

Part of the session's decisions (`peer.core.session`), kept apart because it is the one
place that weighs partners against each other. Partners are sticky: up to `max_partners`
verified neighbours we start exchanges with, so the neighbour copies we hold stay stable
instead of costing a full snapshot for every new pair. At most `max_in_flight` exchanges
hold a slot, never two with one neighbour; one open longer than a few smoothed round trips
stalls and frees its slot (it still waits for its answer or timeout), and at most
`max_partners` are open in all. Behind a partition most partners may sit across the cut:
each stalls in turn, and the ones left free are those on our side. A partner whose
exchange failed is replaced, first by a verified peer whose last request succeeded, and so is
one whose answers keep carrying nothing, or whose claimed step stays put for many of our
publishes (its share of pulls shrinking meanwhile). A partner replaced for giving nothing comes back once a request of its own brings us
news (`reinstate`), so an honest one that answered empty before it verified us is not out for
good, while a key that never sends a frame stays out. Vacancies are filled spread over hosts and subnets
first (`peer.core.diversity`), and a pull goes to the free partner whose answers carried news
most often, more likely (`PartnerConfig`). A partner that answered "busy" (HTTP 429, its rate
budget for us spent) stays a partner but rests until the time it named (`rest`): asked again at
once, it would refuse again, and a peer whose requests keep being refused is benched (its address
turned away, `peer.net.refusal_bench`).
Pure and single-owner, like the session. See docs/architecture.md.
"""

from __future__ import annotations

import random

from peer.core.config import PartnerConfig, SessionConfig
from peer.core.diversity import spread
from peer.core.table import NeighbourTable


class Exchanges:
    """The partner set and the exchanges in flight (token -> address)."""

    def __init__(self, cfg: SessionConfig, rtt_smoothing: float) -> None:
        self.cfg = cfg
        self.partner_cfg: PartnerConfig = cfg.partners
        self.rtt_smoothing = rtt_smoothing
        self.partners: list[str] = []
        self.scores: dict[str, float] = {}
        """Per partner, how often its answers carried news (an average weighted to the newest)."""
        self._empty: dict[str, int] = {}  # partner -> consecutive answers that carried nothing
        self._barren: set[str] = set()  # replaced for giving nothing: taken again when it brings news, or we have no partner
        self._claimed: dict[str, tuple[int, int]] = {}  # address -> (highest step it claimed, our publishes then)
        self._publishes = 0  # our publishes so far: the clock a claimed step that stays put is judged by
        self.in_flight: dict[int, str] = {}
        self._started: dict[int, float] = {}
        self._rtt_s: float | None = None  # smoothed round trip of our exchanges, any partner
        self._resting: dict[str, float] = {}  # partner -> when it may be asked again (it answered busy)

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

    def choose(self, table: NeighbourTable, rng: random.Random, now: float) -> str | None:
        """A verified, live partner not already in an exchange nor resting (vacancies filled first)."""
        healthy: set[str] = set()
        verified: set[str] = set()
        for p in table.live():
            h = table.health(p.address)
            if h is not None and h.last_success is not None:
                verified.add(p.address)
                if h.failures == 0:
                    healthy.add(p.address)
        self.partners = [a for a in self.partners if a in verified]
        self._barren &= verified
        self._claimed = {a: c for a, c in self._claimed.items() if a in verified}
        pc = self.partner_cfg
        for eligible, spreading in ((healthy - self._barren, True), (verified - self._barren, True),
                                    (healthy - self._barren, False), (verified - self._barren, False),
                                    (verified if not self.partners else set(), False)):
            vacancies = self.cfg.max_partners - len(self.partners)
            pool = sorted(eligible - set(self.partners))
            if vacancies <= 0 or not pool:
                continue
            order = [pool.pop(rng.randrange(len(pool))) for _ in range(len(pool))]
            self.partners += (spread(order, vacancies, pc.per_host, pc.per_subnet, held=self.partners) if spreading
                              else order[:vacancies])
        self.scores = {a: self.scores.get(a, 0.5) for a in self.partners}
        self._empty = {a: n for a, n in self._empty.items() if a in self.scores}
        self._resting = {a: t for a, t in self._resting.items() if a in self.scores and t > now}
        busy = set(self.in_flight.values()) | set(self._resting)
        free = [a for a in self.partners if a not in busy]
        if not free:
            return None
        weights = [self.scores[a] * self._thaw(a) for a in free]
        if len(set(weights)) == 1:
            return rng.choice(free)
        return rng.choices(free, weights=weights)[0]

    def _thaw(self, address: str) -> float:
        """1, or less once `address`'s claimed step has stayed put past `frozen_grace_publishes` of
        our publishes: the grace over how long it has. 1 again from `frozen_publishes` on, so that
        its next answer, which replaces it, comes soon and its slot is freed."""
        claimed = self._claimed.get(address)
        if claimed is None:
            return 1.0
        put = self._publishes - claimed[1]
        pc = self.partner_cfg
        return 1.0 if put >= pc.frozen_publishes else min(1.0, pc.frozen_grace_publishes / max(1, put))

    def start(self, token: int, address: str, now: float) -> None:
        self.in_flight[token] = address
        self._started[token] = now

    def rest(self, token: int, until: float) -> str | None:
        """Close `token`, whose partner answered busy: it keeps its place but is not asked again
        before `until`. Its address (None if unknown)."""
        address = self.in_flight.pop(token, None)
        self._started.pop(token, None)
        if address is not None:
            self._resting[address] = max(until, self._resting.get(address, until))
        return address

    def published(self) -> None:
        """We published: one more tick of the clock `PartnerConfig.frozen_publishes` counts in."""
        self._publishes += 1

    def reinstate(self, address: str) -> bool:
        """A request of `address`'s own brought us news: if it was replaced for giving nothing, it may
        fill a vacancy again (its claimed step judged afresh). True when it was."""
        if address not in self._barren:
            return False
        self._barren.discard(address)
        self._claimed.pop(address, None)
        return True

    def finish(self, token: int, failed: bool, rtt: float | None = None, carried: int | None = None,
               owed: bool = True, step: int | None = None) -> tuple[str | None, str | None]:
        """Close `token`; returns its address (None if unknown) and, when this answer replaced its
        partner for giving nothing, why: "barren" or "frozen".

        A failed partner is dropped, and so is one whose last `barren_answers` answers that owed news
        carried nothing (`carried`: the frames its answer brought that changed our copy of it; None:
        not told, and nothing is scored). An empty answer that owed nothing (`owed` False: the
        partner has not published past the copy we hold, as a straggler or a partner with a long
        publish period has not between its publishes) moves neither its score nor its count; but a
        partner whose claimed `step` has not passed the highest it claimed for `frozen_publishes`
        of our publishes has stopped publishing, or claims a step it never leaves so as to owe
        nothing: it is dropped too."""
        address = self.in_flight.pop(token, None)
        self._started.pop(token, None)
        if address is None:
            return None, None
        why = None
        if not failed and carried is not None and address in self.scores:
            if carried > 0 or owed:
                w = self.partner_cfg.news_weight
                self.scores[address] = (1 - w) * self.scores[address] + w * (carried > 0)
                self._empty[address] = 0 if carried > 0 else self._empty.get(address, 0) + 1
                if self._empty[address] >= self.partner_cfg.barren_answers:
                    why = "barren"
            if step is not None and why is None and self._frozen(address, step):
                why = "frozen"
            if why is not None:
                self._barren.add(address)
                failed = True
        if failed and address in self.partners:  # replaced at the next choice
            self.partners.remove(address)
            self._empty.pop(address, None)
        if not failed and rtt is not None and rtt >= 0:
            a = self.rtt_smoothing
            self._rtt_s = rtt if self._rtt_s is None else (1 - a) * self._rtt_s + a * rtt
        return address, why

    def _frozen(self, address: str, step: int) -> bool:
        """Whether `address`, now claiming `step`, has claimed no step past its highest for
        `frozen_publishes` of our publishes (a claim past it starts the count again)."""
        highest, since = self._claimed.get(address, (step - 1, 0))
        if step <= highest and self._publishes - since < self.partner_cfg.frozen_publishes:
            return False
        # a claim past the highest starts the count; so does a drop (taken again as a last resort,
        # it holds its slot as long again)
        self._claimed[address] = (max(step, highest), self._publishes)
        return step <= highest
