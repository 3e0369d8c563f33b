"""The timeouts, cadences and counts of a peer's session: one place for every one of them.

Both drivers (the asyncio/aiohttp one of a real peer and simnet's virtual-clock one) read
these values from here and nowhere else, so a simulated peer waits, retries and gives up
exactly as a real one does. See docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

PULLS_MIXING_ONLY = 2
"""Pulls per publish where a pull only mixes copies: more arrived no sooner (docs/mixing.md#how-many-pulls)."""
PULLS_WITH_PARTNER_STEPS = 4
"""Pulls per publish where each pull also brings a partner's steps, a step on its batch: more pulls
are more batches per step (docs/mixing.md#how-many-pulls)."""


@dataclass(frozen=True)
class CandidateConfig:
    """How unverified candidates share their slots (`peer.core.candidates`): `SessionConfig.candidates`."""

    dial_deadline_s: float = 5.0
    """A hello to an unverified candidate not answered within this drops the candidate (a known
    peer's hello waits the whole request timeout). A hello is a few hundred bytes: a live peer
    answers well within the time a TCP connect may take."""
    per_host: int = 4
    """Unverified candidates at one host (the IP of their address) at once: room for a few peers
    on one machine or behind one address, while one address's claims cannot fill every slot."""
    per_block: int = 8
    """Unverified candidates in one IPv6 /48 at once (`peer.core.budget_key.SITE_BLOCKS`): one
    allocation is 65,536 /64s, each a host of its own, so without it one /48's claims filled every
    slot hearsay may take. Two hosts' worth: a site's peers are verified a few at a time, and one
    allocation leaves the rest of hearsay's slots (`SessionConfig.max_candidates` less `reserved`)
    to others. An IPv4 address has no block: a /24 is often unrelated customers (a provider's
    carrier-grade NAT)."""
    reserved: int = 4
    """Candidate slots hearsay cannot take, kept for addresses found by mDNS."""

    def __post_init__(self) -> None:
        if not (self.dial_deadline_s > 0 and math.isfinite(self.dial_deadline_s)):
            raise ValueError(f"dial_deadline_s must be a finite number > 0, got {self.dial_deadline_s!r}")
        if self.per_host < 1 or self.per_block < 1 or self.reserved < 0:
            raise ValueError(f"per_host and per_block must be >= 1 and reserved >= 0, got {self.per_host}, "
                             f"{self.per_block}, {self.reserved}")



@dataclass(frozen=True)
class PartnerConfig:
    """How partners are weighed against each other (`peer.core.exchanges`): `SessionConfig.partners`."""

    per_host: int = 2
    """Partners on one host (IP) while partners elsewhere can be found: one machine's many
    listeners fill the rest of the slots only when nobody else is there."""
    per_subnet: int = 4
    """As `per_host`, per /24 (IPv4) or /48 (IPv6; `peer.core.diversity.subnet_of`)."""
    barren_answers: int = 3
    """Consecutive answers that owed news and carried nothing after which a partner is replaced
    like a failed one, and taken again only when we have no partner at all: a prompt but useless
    partner otherwise keeps its slot for good. An answer owes news when its sender says it
    published past the copy we hold of it (or we hold none): an honest partner then sends it, and
    one between its publishes owes nothing, however rarely it publishes. At least 2: the answer to
    a first contact (a request without a ticket of the partner's) carries a ticket and nothing else."""
    frozen_publishes: int = 256
    """Our publishes after which a partner whose claimed step has not passed the highest it claimed
    before is replaced like a barren one. Its answers then owe nothing, so a key that sent one
    snapshot and answers empty at that step would keep its slot for good; an honest partner's step
    moves at each of its publishes, so this spares one publishing up to this many times slower than
    we do (a straggler, a long publish period), and a partner that stopped training gives its slot up."""
    frozen_grace_publishes: int = 32
    """Our publishes a partner's claimed step may stay put before its share of our pulls shrinks:
    past that it is drawn in proportion to its score times this over how long its step has stayed
    put, so a key answering empty at a step it never leaves takes less and less of our pulls
    until `frozen_publishes` replaces it, while a partner publishing at least this often (a
    straggler, a long publish period) is drawn by its score alone. At most `frozen_publishes`."""
    news_weight: float = 0.25
    """Weight of the newest answer in a partner's score (news: 1, nothing: 0). A pull goes to a free
    partner drawn in proportion to its score, a new one starting at half: one that answers news
    gets most pulls, and one that answers nothing is still asked, until it is replaced."""

    def __post_init__(self) -> None:
        if self.per_host < 1 or self.per_subnet < 1 or self.barren_answers < 2 or self.frozen_publishes < 1:
            raise ValueError(f"per_host, per_subnet and frozen_publishes must be >= 1 and barren_answers >= 2, "
                             f"got {self}")
        if not 1 <= self.frozen_grace_publishes <= self.frozen_publishes:
            raise ValueError(f"frozen_grace_publishes must be in [1, frozen_publishes], got {self}")
        if not (0 < self.news_weight <= 1 and math.isfinite(self.news_weight)):
            raise ValueError(f"news_weight must be in (0, 1], got {self.news_weight!r}")



@dataclass
class SessionConfig:
    """Decisions of `peer.core.session.Session` that involve time or counts."""

    request_timeout_s: float = 30.0
    """A request not answered within this fails (a hello), and the part of every transfer's
    deadline that does not grow with its size (`transfer_deadline_s`): a round trip, a queue
    on the other side's node worker and a connect, with margin."""
    min_transfer_rate: float = 2e6
    """Bytes per second a transfer must at least keep up: one that may carry n bytes (an
    exchange, whose answer can hold a whole snapshot, or a state) fails after
    `request_timeout_s` + n / this. A snapshot is the model's size, from megabytes to ten
    gigabytes across the presets, so no one fixed timeout fits them all: 2 MB/s (a 16 Mb/s
    uplink, building, signing and verifying included) gives the 100m preset's snapshot about
    four minutes and echo-2.4b's an hour and a half. Slower than this is a link too poor to
    train over, or a peer holding our connection on purpose."""
    connect_timeout_s: float = 5.0
    """Of `request_timeout_s`, how long a TCP connect may take (a dead host fails fast)."""
    pulls_per_publish: int | None = None
    """Exchanges started at each publish, each with a different partner (as slots allow): the m
    of the mixing row, where each pulled copy weighs 2/(1 + m) of a pair average
    (`peer.core.mixer`). One partner per period caps how fast a swarm agrees, however large it
    is; every pull costs an update's bytes each way. None: decided by `for_partner_steps`,
    `PULLS_WITH_PARTNER_STEPS` where this peer takes its partners' steps, else `PULLS_MIXING_ONLY`."""
    max_in_flight: int = 4
    """Exchanges running at once, each with a different neighbour: one neighbour that stopped
    answering then holds one slot until its timeout, not the whole peer. At least
    `pulls_per_publish`, so one publish's pulls can all start."""
    stall_min_s: float = 2.0
    """An exchange unanswered for max(this, `stall_rtt_factor` × our smoothed exchange round
    trip) is stalled: it waits on until `request_timeout_s` but stops holding an in-flight
    slot, so a partition or a frozen neighbour does not stop this peer mixing with the others.
    At most `max_partners` exchanges are open at once, stalled or not, one per neighbour."""
    stall_rtt_factor: float = 4.0
    """See `stall_min_s`: how many smoothed round trips an exchange may take before it stalls."""
    max_partners: int = 8
    """Neighbours this peer starts exchanges with (kept while they answer). Others may still
    exchange with us; bounding our own choices keeps the neighbour copies we hold stable
    instead of paying a full snapshot for every new pair."""
    hello_every_s: float = 5.0
    """Mean seconds between peer-exchange rounds (GET /v1/hello to a random known peer),
    jittered uniformly in [0.5, 1.5]× so peers do not synchronise."""
    hello_sample: int = 16
    """Peers we name in our own hello (only ones that answered us)."""
    evict_every_s: float = 1.0
    """Seconds between judging the neighbour table (failures, silence)."""
    max_failures: int = 3
    """Consecutive failed requests after which a peer is dead."""
    silence_timeout_s: float = 120.0
    """Seconds without a successful request after which a peer is dead."""
    max_peers: int = 64
    """Entries in the neighbour table."""
    max_candidates: int = 16
    """Heard-of addresses not yet verified (dialled, and a hello signed over our nonce came back)
    held at once; more are refused, and a candidate never displaces a verified peer."""
    bootstrap_retry_min_s: float = 5.0
    """First wait before re-dialling a dead `--peer` address; doubles after each failure."""
    bootstrap_retry_max_s: float = 300.0
    """Longest wait between re-dials of a dead `--peer` address."""
    join: bool = True
    """At start, ask the known peers for their step and adopt the state of one further along."""
    join_wait_s: float = 2.0
    """How long joining waits for a first known peer (mDNS, `--peer`) before training alone."""
    join_timeout_s: float = 20.0
    """How long joining keeps asking known peers when none has answered yet."""
    join_max_asked: int = 8
    """Known peers asked for their step when joining (each costs one small hello)."""
    join_retry_s: float = 1.0
    """While joining and nobody answered yet, known peers are asked again after this long."""
    state_resumes: int = 4
    """Times a state transfer cut short asks the same peer again for the bytes it lacks, each with
    a deadline for those bytes alone (peer.net.state_resume), before the join gives that peer up:
    at the large presets a state is gigabytes, which one dropped connection would otherwise cost
    whole. 0 never resumes."""
    candidates: CandidateConfig = field(default_factory=CandidateConfig)
    """How unverified candidates share the `max_candidates` slots."""
    partners: PartnerConfig = field(default_factory=PartnerConfig)
    """How the `max_partners` partners are chosen, scored and replaced."""

    def __post_init__(self) -> None:
        positive = {
            "request_timeout_s": self.request_timeout_s, "connect_timeout_s": self.connect_timeout_s,
            "hello_every_s": self.hello_every_s, "evict_every_s": self.evict_every_s,
            "silence_timeout_s": self.silence_timeout_s, "bootstrap_retry_min_s": self.bootstrap_retry_min_s,
            "stall_min_s": self.stall_min_s, "join_retry_s": self.join_retry_s,
            "min_transfer_rate": self.min_transfer_rate,
        }
        for name, value in positive.items():
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.pulls_per_publish is not None and self.pulls_per_publish < 1:
            raise ValueError(f"pulls_per_publish must be >= 1 (or None: decided by partner steps), "
                             f"got {self.pulls_per_publish!r}")
        for name in ("max_in_flight", "max_partners", "max_failures", "max_peers",
                     "max_candidates", "join_max_asked"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if not (self.stall_rtt_factor >= 1 and math.isfinite(self.stall_rtt_factor)):
            raise ValueError(f"stall_rtt_factor must be a finite number >= 1, got {self.stall_rtt_factor!r}")
        if self.pulls_per_publish is not None and self.pulls_per_publish > min(self.max_in_flight, self.max_partners):
            raise ValueError(f"pulls_per_publish ({self.pulls_per_publish}) must be <= max_in_flight "
                             f"({self.max_in_flight}) and max_partners ({self.max_partners})")
        if self.hello_sample < 0 or self.state_resumes < 0:
            raise ValueError(f"hello_sample and state_resumes must be >= 0, got {self.hello_sample!r}, "
                             f"{self.state_resumes!r}")
        if self.bootstrap_retry_max_s < self.bootstrap_retry_min_s:
            raise ValueError("bootstrap_retry_max_s must be >= bootstrap_retry_min_s")
        for name in ("join_wait_s", "join_timeout_s"):
            if not (getattr(self, name) >= 0 and math.isfinite(getattr(self, name))):
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)!r}")
        if not isinstance(self.candidates, CandidateConfig) or not isinstance(self.partners, PartnerConfig):
            raise TypeError("candidates and partners must be a CandidateConfig and a PartnerConfig")
        self.connect_timeout_s = min(self.connect_timeout_s, self.request_timeout_s)

    def transfer_deadline_s(self, nbytes: int) -> float:
        """Seconds a request that may move `nbytes` (both ways together) gets before it fails."""
        return self.request_timeout_s + max(0, nbytes) / self.min_transfer_rate

    def exchange_deadline_s(self, snapshot_bytes: int) -> float:
        """An exchange's deadline: its request may push our snapshot and its answer carry theirs."""
        return self.transfer_deadline_s(2 * snapshot_bytes)

    @property
    def pulls(self) -> int:
        """`pulls_per_publish`, or where it was left to `for_partner_steps` and nobody asked it, the
        count for a peer that only mixes."""
        return self.pulls_per_publish if self.pulls_per_publish is not None else self._default_pulls(False)

    def for_partner_steps(self, takes_them: bool) -> "SessionConfig":
        """These settings with `pulls_per_publish` decided, where it was left open, by whether this
        peer takes its partners' steps (`GossipConfig.partner_steps`, after `for_trainer`)."""
        if self.pulls_per_publish is not None:
            return self
        return dataclasses.replace(self, pulls_per_publish=self._default_pulls(takes_them))

    def _default_pulls(self, takes_them: bool) -> int:
        pulls = PULLS_WITH_PARTNER_STEPS if takes_them else PULLS_MIXING_ONLY
        return min(pulls, self.max_in_flight, self.max_partners)
