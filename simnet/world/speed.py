"""How long each simulated peer takes per training step.

The loss of every step is real; only its duration is modelled, so simulated wall-clock
is meaningful: a peer's step takes `base_step_s × factor_i × jitter`, where `factor_i` is
log-normal across peers (hardware spread), named stragglers get an explicit factor, and
`jitter` is a per-step log-normal wobble. All draws come from seeded streams keyed by the
peer, so gossip and the synchronous baselines see the very same step times.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass
class SpeedConfig:
    base_step_s: float = 0.1
    """Virtual seconds one local step takes on a typical peer."""
    spread: float = 0.0
    """Sigma of the log-normal per-peer speed factor (0: all peers equally fast)."""
    jitter: float = 0.0
    """Sigma of the log-normal per-step wobble (0: every step takes the same time)."""
    stragglers: dict[int, float] = field(default_factory=dict)
    """Peer index -> slowdown factor (5.0: five times slower), replacing the drawn factor."""

    def __post_init__(self) -> None:
        if not (self.base_step_s > 0 and math.isfinite(self.base_step_s)):
            raise ValueError(f"speed.base_step_s must be > 0, got {self.base_step_s}")
        if self.spread < 0 or self.jitter < 0:
            raise ValueError("speed.spread and speed.jitter must be >= 0")
        self.stragglers = {int(k): float(v) for k, v in self.stragglers.items()}
        for k, v in self.stragglers.items():
            if k < 0 or not v > 0:
                raise ValueError(f"speed.stragglers: peer {k} needs index >= 0 and factor > 0, got {v}")


class SpeedModel:
    """Per-peer factors drawn once; per-step jitter from one stream per peer."""

    def __init__(self, cfg: SpeedConfig, n_peers: int, seed: int) -> None:
        self.cfg = cfg
        rng = random.Random(f"simnet-speed:{seed}")
        self.factors = [math.exp(rng.gauss(0.0, cfg.spread)) if cfg.spread else 1.0 for _ in range(n_peers)]
        for i, f in cfg.stragglers.items():
            if i < n_peers:
                self.factors[i] = f
        self._streams = [random.Random(f"simnet-jitter:{seed}:{i}") for i in range(n_peers)]

    def step_time(self, peer: int) -> float:
        """Duration of the next step of `peer` (advances that peer's jitter stream)."""
        jitter = math.exp(self._streams[peer].gauss(0.0, self.cfg.jitter)) if self.cfg.jitter else 1.0
        return self.cfg.base_step_s * self.factors[peer] * jitter
