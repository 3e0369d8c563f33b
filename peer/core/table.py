"""The neighbour table: which peers we know, whether they answer, whom to gossip with next.

Pure bookkeeping: no I/O, no asyncio, no clock. Time comes in as `now` (seconds, any
monotonic origin) and randomness as a `random.Random`, so the same calls give the same
table in a real peer, in simnet and in a unit test.

Health is judged only by our own attempts: `mark_success` after a verified reply,
`mark_failure` after an error or timeout. A peer is dead after `max_failures` consecutive
failures, or after `timeout_s` without a success (counted from its last success, or from
when it was added or moved to a new address). Re-announcing a peer does not restart that
clock, so addresses kept alive only by gossip about them still expire.

Static (`--peer`) entries are the way back into the swarm after a partition, so they are
never dropped, neither for space nor by `evict_dead`: a dead static peer stays in the
table, is not chosen, and comes back on its next success. `peer.core.session.Session`
re-dials dead static peers with exponential backoff (its `SessionConfig.bootstrap_retry_*`).
Being static belongs to the peer, not to the address: when a bootstrap peer is found to
answer at another address too, the flag moves with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Collection, Iterable

from peer.core.addresses import PeerInfo, is_peer_id, parse_address
from peer.core.config import SessionConfig
from peer.core.diversity import spread


@dataclass
class NeighbourConfig:
    """The table's bounds; a session's come from its `SessionConfig` (`of`), and so do these defaults."""

    max_peers: int = SessionConfig.max_peers
    """Bound on entries; when full, the least recently successful non-static one goes."""
    max_failures: int = SessionConfig.max_failures
    """Consecutive failures after which a peer is dead."""
    timeout_s: float = SessionConfig.silence_timeout_s
    """Seconds without a success after which a peer is dead."""
    self_peer_id: str = ""
    """Our own public key hex: never added, and an entry that turns out to be us is dropped."""
    self_addresses: tuple[str, ...] = ()
    """Addresses we listen on (after binding): never added."""
    rtt_smoothing: float = 0.125
    """Weight of a new round-trip sample in the smoothed RTT (TCP's SRTT uses 1/8)."""
    hello_per_host: int = 4
    """Peers on one host (IP) that one hello of ours names: many listeners on one machine that
    answer us are not handed on to the swarm as many peers."""
    hello_per_subnet: int = 8
    """As `hello_per_host`, per /24 (IPv4) or /48 (IPv6; `peer.core.diversity.subnet_of`)."""

    def __post_init__(self) -> None:
        if self.max_peers < 1:
            raise ValueError(f"max_peers must be >= 1, got {self.max_peers}")
        if self.max_failures < 1:
            raise ValueError(f"max_failures must be >= 1, got {self.max_failures}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.hello_per_host < 1 or self.hello_per_subnet < 1:
            raise ValueError(f"hello_per_host and hello_per_subnet must be >= 1, got {self.hello_per_host}, "
                             f"{self.hello_per_subnet}")
        if not 0 < self.rtt_smoothing <= 1:
            raise ValueError(f"rtt_smoothing must be in (0, 1], got {self.rtt_smoothing}")
        if isinstance(self.self_addresses, str):
            raise ValueError(f"self_addresses must be a sequence of 'HOST:PORT', not {self.self_addresses!r}")
        self.self_addresses = tuple(self.self_addresses)
        for address in self.self_addresses:
            parse_address(address)
        if self.self_peer_id and not is_peer_id(self.self_peer_id):
            raise ValueError(f"self_peer_id must be 64 lowercase hex characters or empty, got {self.self_peer_id!r}")

    @classmethod
    def of(cls, cfg: SessionConfig, self_peer_id: str = "", self_addresses: tuple[str, ...] = ()) -> "NeighbourConfig":
        """The table of a session with `cfg`."""
        return cls(max_peers=cfg.max_peers, max_failures=cfg.max_failures, timeout_s=cfg.silence_timeout_s,
                   self_peer_id=self_peer_id, self_addresses=self_addresses)


@dataclass(frozen=True)
class NeighbourHealth:
    """A snapshot of one entry, for metrics, status pages and tests."""

    info: PeerInfo
    static: bool
    added_at: float
    last_success: float | None
    failures: int  # consecutive
    dead: bool
    rtt_s: float | None  # smoothed


@dataclass
class _Entry:
    info: PeerInfo
    static: bool
    added_at: float  # also reset when the peer moves to a new address
    last_success: float | None = None
    failures: int = 0
    dead: bool = False
    rtt_s: float | None = None

    def clock_start(self) -> float:
        return self.added_at if self.last_success is None else max(self.last_success, self.added_at)

    def lru_key(self) -> tuple[bool, float, float]:
        """Sorts the first candidate to drop first: dead, then least recently successful."""
        return (not self.dead, float("-inf") if self.last_success is None else self.last_success, self.added_at)


class NeighbourTable:
    """Known peers keyed by address, with their health; see the module docstring."""

    def __init__(self, cfg: NeighbourConfig | None = None) -> None:
        self.cfg = cfg or NeighbourConfig()
        self._entries: dict[str, _Entry] = {}

    # -- queries ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, address: object) -> bool:
        return address in self._entries

    def get(self, address: str) -> PeerInfo | None:
        entry = self._entries.get(address)
        return entry.info if entry else None

    def health(self, address: str) -> NeighbourHealth | None:
        e = self._entries.get(address)
        if e is None:
            return None
        return NeighbourHealth(e.info, e.static, e.added_at, e.last_success, e.failures, e.dead, e.rtt_s)

    def live(self) -> list[PeerInfo]:
        """Entries not (yet) judged dead, sorted by address so the order never depends on history."""
        return [self._entries[a].info for a in sorted(self._entries) if not self._entries[a].dead]

    def verified(self) -> list[PeerInfo]:
        """Live entries that answered us at least once (what peer exchange has confirmed), sorted by address."""
        return [self._entries[a].info for a in sorted(self._entries)
                if not self._entries[a].dead and self._entries[a].last_success is not None]

    def static_peers(self) -> list[PeerInfo]:
        """The bootstrap entries, dead or alive: worth an occasional retry even when dead."""
        return [self._entries[a].info for a in sorted(self._entries) if self._entries[a].static]

    def choose(self, rng: random.Random, k: int = 1, exclude: Collection[str] = ()) -> list[PeerInfo]:
        """Up to k distinct live peers, uniformly at random; `exclude` holds addresses or peer ids."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        pool = [p for p in self.live() if p.address not in exclude and not (p.peer_id and p.peer_id in exclude)]
        return rng.sample(pool, min(k, len(pool)))

    def sample_for_exchange(self, rng: random.Random, n: int, exclude: Collection[str] = ()) -> list[PeerInfo]:
        """Up to n live peers that answered us at least once, to share in a /v1/hello reply.

        Only peers we have reached ourselves are passed on, so one bad address is not
        spread through the swarm by peers that never tried it, and at most `hello_per_host` and
        `hello_per_subnet` of one host and subnet (`peer.core.diversity`).
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        pool = [p for p in self.verified() if p.address not in exclude and p.peer_id not in exclude]
        return spread(rng.sample(pool, len(pool)), n, self.cfg.hello_per_host, self.cfg.hello_per_subnet)

    def is_self(self, info: PeerInfo) -> bool:
        return bool(info.peer_id and info.peer_id == self.cfg.self_peer_id) or info.address in self.cfg.self_addresses

    # -- updates ------------------------------------------------------------------------

    def add(self, info: PeerInfo, now: float) -> bool:
        """Learn of a peer; True when the table changed. Never resets a known peer's clock.

        A known peer_id at a new address moves there (with a fresh clock and no failures),
        except that a peer we reach fine is not moved by hearsay (source "exchange").
        A different peer_id announced for a known address is ignored: only a verified
        hello (`mark_success(..., peer_id=)`) may rebind an address.
        """
        if self.is_self(info):
            return False
        static = info.source == "static"
        entry = self._entries.get(info.address)
        if entry is not None:
            return self._merge_into(entry, info, static)
        other = self._by_peer_id(info.peer_id)
        if other is not None:
            if info.source == "exchange" and other.last_success is not None and other.failures == 0:
                return False
            del self._entries[other.info.address]
            other.info = replace(other.info, address=info.address, **_known_fields(info))
            other.static = other.static or static
            other.added_at, other.failures, other.dead = now, 0, False
            self._entries[info.address] = other
            return True
        if len(self._entries) >= self.cfg.max_peers and not self._drop_one() and not static:
            return False  # full of static peers; a static one is admitted regardless
        self._entries[info.address] = _Entry(info=info, static=static, added_at=now)
        return True

    def mark_success(self, address: str, now: float, peer_id: str | None = None, rtt: float | None = None) -> bool:
        """Record a verified reply; `peer_id` is the key its hello was signed with.

        Unknown addresses are ignored (add them first). A peer_id that is ours removes the
        entry (a `--peer` that points back at us); one already known at another address
        merges that entry into this one, since this address has just been proven to work.
        Returns True when the entry is (still) in the table.
        """
        entry = self._entries.get(address)
        if entry is None:
            return False
        if peer_id:
            if peer_id == self.cfg.self_peer_id:
                del self._entries[address]
                return False
            other = self._by_peer_id(peer_id)
            if other is not None and other is not entry:
                del self._entries[other.info.address]
                entry.static = entry.static or other.static
                entry.rtt_s = entry.rtt_s if entry.rtt_s is not None else other.rtt_s
            if entry.info.peer_id != peer_id:
                entry.info = replace(entry.info, peer_id=peer_id)
        entry.last_success, entry.failures, entry.dead = now, 0, False
        if rtt is not None:
            a = self.cfg.rtt_smoothing
            entry.rtt_s = rtt if entry.rtt_s is None else (1 - a) * entry.rtt_s + a * rtt
        return True

    def mark_failure(self, address: str, now: float) -> bool:
        """Record a failed attempt; True when this failure made the peer dead."""
        entry = self._entries.get(address)
        if entry is None:
            return False
        entry.failures += 1
        if not entry.dead and entry.failures >= self.cfg.max_failures:
            entry.dead = True
            return True
        return False

    def evict_dead(self, now: float) -> list[PeerInfo]:
        """Judge every entry at `now`; remove the dead non-static ones and return them."""
        evicted = []
        for address in sorted(self._entries):
            entry = self._entries[address]
            if entry.failures >= self.cfg.max_failures or now - entry.clock_start() >= self.cfg.timeout_s:
                entry.dead = True
            if entry.dead and not entry.static:
                evicted.append(self._entries.pop(address).info)
        return evicted

    def remove(self, address: str) -> PeerInfo | None:
        entry = self._entries.pop(address, None)
        return entry.info if entry else None

    def update_all(self, infos: Iterable[PeerInfo], now: float) -> int:
        """`add` each of `infos` (a peer-exchange list); returns how many changed the table."""
        return sum(self.add(info, now) for info in infos)

    # -- internals ----------------------------------------------------------------------

    def _by_peer_id(self, peer_id: str) -> _Entry | None:
        if not peer_id:
            return None
        for entry in self._entries.values():
            if entry.info.peer_id == peer_id:
                return entry
        return None

    def _merge_into(self, entry: _Entry, info: PeerInfo, static: bool) -> bool:
        changed = static and not entry.static
        entry.static = entry.static or static
        if info.peer_id and entry.info.peer_id and info.peer_id != entry.info.peer_id:
            return changed  # conflicting hearsay; see add()
        fields = _known_fields(info)
        if info.peer_id and not entry.info.peer_id:
            if self._by_peer_id(info.peer_id) is not None:
                return changed  # that id already has an address; a verified hello will merge
            fields["peer_id"] = info.peer_id
        fields = {k: v for k, v in fields.items() if getattr(entry.info, k) != v}
        if fields:
            entry.info = replace(entry.info, **fields)
        return changed or bool(fields)

    def _drop_one(self) -> bool:
        candidates = [e for e in self._entries.values() if not e.static]
        if not candidates:
            return False
        victim = min(candidates, key=lambda e: (e.lru_key(), e.info.address))
        del self._entries[victim.info.address]
        return True


def _known_fields(info: PeerInfo) -> dict[str, str]:
    """The swarm and fingerprint an announcement fills in (empty ones say nothing)."""
    return {k: getattr(info, k) for k in ("swarm", "fingerprint") if getattr(info, k)}
