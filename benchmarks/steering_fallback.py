"""How far a steering neighbour drags a peer with fewer than three neighbours, by fallback radius.

A victim at norm 100 trains 0.1 per publish along its own axis and mixes, through the production
Mixer (two pulls per publish, γ 0.5), with a liar whose copy sits `d` from ours along a fixed
direction, `d` starting at 1 and multiplied by `growth` at every publish (1.25: radius steering;
1.0: a liar that stays put), beside an honest copy 0.1 away when `neighbours` is 2. Printed: how
far along the liar's direction the victim ends, for the radius from our own moves (the rule), the
median of our own past distances to neighbours (the other candidate), and the cap alone (before).

    python benchmarks/steering_fallback.py [--periods 80]
"""

from __future__ import annotations

import argparse
import statistics
from collections import deque
from typing import Sequence

import torch

from async_opt import NeighbourRadius, PublicCopy
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.view import CopyView, MixView

T = 1_000_000.0
RADII = ("own_moves", "past_distances", "cap_only")


class PastDistanceRadius(NeighbourRadius):
    """The candidate not taken: before enough neighbours, the lower median of the last 64 distances seen."""

    def __init__(self) -> None:
        super().__init__(q=0.5, multiplier=1.0, min_neighbours=3, max_relative=0.5)
        self.seen: deque[float] = deque(maxlen=64)

    def observe(self, key: object, distance: float) -> None:
        super().observe(key, distance)
        self.seen.append(float(distance))

    def radius(self, self_norm: float, own_moves: Sequence[float] | None = None) -> float:
        if len(self._latest) >= self.min_neighbours:
            return super().radius(self_norm, own_moves)
        return min(self.max_relative * self_norm, statistics.median_low(self.seen)) if self.seen else 0.0


class PastDistanceConfig(GossipConfig):
    """Gossip settings whose mixer clips with `PastDistanceRadius`."""

    def clip_radius(self) -> NeighbourRadius:
        return PastDistanceRadius()


def steered_drift(radius: str, neighbours: int, growth: float = 1.25, periods: int = 40) -> float:
    """How far along the liar's direction the victim ends (module docstring); `radius` one of RADII."""
    own_multiplier = 1e12 if radius == "cap_only" else 4.0
    config = PastDistanceConfig if radius == "past_distances" else GossipConfig
    cfg = config(swarm="t", staleness="constant,gamma=0.5", clip_multiplier=1.0, clip_own_multiplier=own_multiplier)
    mixer = Mixer(cfg, pulls=2)
    x = torch.zeros(16)
    x[0] = 100.0
    public = PublicCopy(x)
    e = torch.zeros(16)
    e[3] = 1.0
    distance = 0.01 * 100.0
    for t in range(1, periods + 1):
        x = x.clone()
        x[0] += 0.1  # our own training between publishes
        public.publish(x, lambda d: d)
        distance *= growth
        copies = [CopyView(b"s" * 32, 2 * t, public.x_hat + distance * e, T + t, pulled=2 * t)]
        if neighbours == 2:
            honest = public.x_hat.clone()
            honest[5] += 0.1
            copies.append(CopyView(b"h" * 32, 2 * t + 1, honest, T + t, pulled=2 * t + 1))
        view = MixView(public.x_hat, tuple(copies), float(public.x_hat.norm()), T + t, tuple(public.moves))
        x, _ = mixer.mix(x, view, 10, T + t)
    return float(x[3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--periods", type=int, default=80)
    args = ap.parse_args()
    print("| liar's growth per publish | neighbours | " + " | ".join(RADII) + " |")
    print("|---|---|" + "---|" * len(RADII))
    for growth in (1.25, 1.05, 1.0):
        for neighbours in (1, 2):
            cells = [f"{steered_drift(r, neighbours, growth, args.periods):.2f}" for r in RADII]
            print(f"| {growth} | {neighbours} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
