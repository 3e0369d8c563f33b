"""Peers leaving and joining: a fixed schedule or a Poisson process.

A departure is a crash (no goodbye: the peer's address goes silent and neighbours find
out by timeouts) or a graceful leave (it stops at a step boundary and its address
refuses connections, so neighbours find out within one round trip). The gossip protocol
has no goodbye message, so a graceful leave is only faster to detect. A departed peer's
slot comes back after a downtime as a restarted peer: same key, fresh process, which
fetches a signed state from one neighbour and trains at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

MODES = ("none", "poisson", "schedule")
ACTIONS = ("crash", "leave", "join")


@dataclass(frozen=True)
class ChurnEvent:
    t: float
    peer: int
    action: str  # crash | leave | join


@dataclass
class ChurnConfig:
    mode: str = "none"
    """none | poisson | schedule."""
    rate_per_min: float = 0.0
    """poisson: departures per simulated minute, as a fraction of the swarm (0.3 = 30%)."""
    crash_fraction: float = 0.5
    """poisson: share of departures that are crashes (the rest leave gracefully)."""
    downtime_s: float = 20.0
    """poisson: mean (exponential) time a departed slot stays away before it rejoins."""
    start_s: float = 0.0
    """poisson: no churn before this time."""
    min_online: int = 2
    """poisson: a departure that would leave fewer peers online is skipped."""
    fetch_state: bool = True
    """A rejoining peer adopts a neighbour's signed state; false trains from fresh initial
    weights instead (the control arm of churn experiments)."""
    events: list[dict] = field(default_factory=list)
    """schedule: [{t = 30.0, peer = 3, action = "crash"}, ...]."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"churn.mode must be one of {MODES}, got {self.mode!r}")
        if self.rate_per_min < 0 or not 0 <= self.crash_fraction <= 1:
            raise ValueError("churn.rate_per_min must be >= 0 and crash_fraction in [0, 1]")
        if not self.downtime_s > 0 or self.start_s < 0 or self.min_online < 1:
            raise ValueError("churn.downtime_s must be > 0, start_s >= 0, min_online >= 1")
        for e in self.events:
            if set(e) != {"t", "peer", "action"} or e["action"] not in ACTIONS or e["t"] < 0:
                raise ValueError(f"churn event {e!r}: need t >= 0, peer and action in {ACTIONS}")


def churn_events(cfg: ChurnConfig, n: int, duration_s: float, seed: int) -> list[ChurnEvent]:
    """The whole timeline of departures and joins, drawn up front from the seed."""
    if cfg.mode == "schedule":
        return sorted(
            (ChurnEvent(float(e["t"]), int(e["peer"]), str(e["action"])) for e in cfg.events if int(e["peer"]) < n),
            key=lambda e: (e.t, e.peer),
        )
    if cfg.mode == "none" or cfg.rate_per_min == 0:
        return []
    rng = random.Random(f"simnet-churn:{seed}")
    rate = cfg.rate_per_min * n / 60.0  # departures per second
    online = set(range(n))
    returns: list[tuple[float, int]] = []
    events: list[ChurnEvent] = []
    t = cfg.start_s
    while True:
        t += rng.expovariate(rate)
        if t >= duration_s:
            break
        for back_t, peer in sorted(r for r in returns if r[0] <= t):
            online.add(peer)
            returns.remove((back_t, peer))
            events.append(ChurnEvent(back_t, peer, "join"))
        if len(online) <= cfg.min_online:
            continue
        peer = rng.choice(sorted(online))
        online.remove(peer)
        action = "crash" if rng.random() < cfg.crash_fraction else "leave"
        events.append(ChurnEvent(t, peer, action))
        returns.append((t + rng.expovariate(1.0 / cfg.downtime_s), peer))
    events += [ChurnEvent(bt, p, "join") for bt, p in returns if bt < duration_s]
    return sorted(events, key=lambda e: (e.t, e.peer, e.action))
