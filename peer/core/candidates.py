"""Which heard-of addresses may hold one of the few slots for unverified candidates, and for how long.

A candidate is an address we heard of (peer exchange, an inbound exchange, mDNS) and have not yet
verified by dialling it. Slots for them are scarce (`SessionConfig.max_candidates`), and a claim
costs its maker nothing: an attacker naming addresses that accept a connection and never answer
kept every slot held, each for three request timeouts, so a newcomer that contacted us was never
verified. So a slot is cheap to lose and hard to hoard: a dial to a candidate not answered within
`dial_deadline_s` drops it; one host holds at most `per_host` slots (an attacker holds a few per
address it controls, not all), and one IPv6 /48 at most `per_block` (its 65,536 /64s are as
many hosts); and what hearsay (peer exchange, inbound exchanges) may take leaves `reserved` slots
for addresses found by mDNS, which only a host on our link can announce.
Addresses a user named (`--peer`) are never candidates: they always get in. Pure, like the session.
"""

from __future__ import annotations

import math
from collections import Counter

from peer.core.addresses import PeerInfo
from peer.core.budget_key import SITE_BLOCKS
from peer.core.config import CandidateConfig
from peer.core.diversity import host_of


def block_of(address: str) -> str | None:
    """The IPv6 /48 a candidate's address lies in; None for IPv4 and host names."""
    return SITE_BLOCKS.of(host_of(address))


def room_for(info: PeerInfo, unverified: list[str], max_candidates: int, cfg: CandidateConfig) -> bool:
    """Whether `info`, not yet in the table, may take a candidate slot beside the `unverified`
    addresses holding one: below the cap (less the reserve, for hearsay) and below its host's and
    its block's shares."""
    cap = max_candidates if info.source == "mdns" else max(1, max_candidates - cfg.reserved)
    if len(unverified) >= cap or Counter(map(host_of, unverified))[host_of(info.address)] >= cfg.per_host:
        return False
    block = block_of(info.address)
    return block is None or sum(block_of(a) == block for a in unverified) < cfg.per_block


def overdue(dialled: dict[str, float], unverified: list[str], now: float, cfg: CandidateConfig) -> list[str]:
    """The candidates among `unverified` whose dial (`dialled`: address -> when) is past its deadline."""
    return [a for a in unverified if a in dialled and now - dialled[a] >= cfg.dial_deadline_s]


def next_deadline(dialled: dict[str, float], unverified: list[str], cfg: CandidateConfig) -> float:
    """When the earliest dial to one of the `unverified` is due (inf: none is being dialled)."""
    return min((dialled[a] + cfg.dial_deadline_s for a in unverified if a in dialled), default=math.inf)
