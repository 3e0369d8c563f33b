"""Byzantine peers: a Trainer wrapper whose parameters — what GossipNode publishes — lie.

The attacker runs the real peer core over the real wire; only the vector its node reads
from the trainer is manipulated, so the attack travels in genuine signed frames and the
honest side defends with exactly the code it runs in production. The attacker still
trains honestly and, unless `mixes = false`, mixes in what it receives (the mixing delta is
applied to its honest parameters), so it stays close to the swarm, as a careful adversary would.

Kinds (u = x − x₀ is the attacker's honest progress since the shared start x₀):
- sign_flip: publishes x₀ − s·u (its update with the sign flipped, scaled by s);
- scale: publishes x₀ + s·u (model-replacement style boosting);
- random: publishes x + s·ε·rms(x), ε ~ N(0, I) fresh at every read;
- alie: "A Little Is Enough" (Baruch et al. 2019): μ − z·σ of the copies it holds
  (its own and its neighbours'), coordinate-wise: small enough to pass distance checks;
- steer: radius steering: publishes x + d·e, e a fixed random unit direction, d starting at 1% of
  `scale`·||x|| and growing by `growth` at every read, so the attacker is always a little
  farther than last time: against a radius taken from a window of recent distances it owns
  the window and drags the radius (and its victims) along;
- edge: the attacker who knows the clipping rule: publishes x − r·u/||u||, straight back
  along its progress, at r = `scale` × the median of its distances to the copies it holds
  (what the receivers' default radius is made of): as far as a pull can go unshortened, in
  the one direction that undoes training, at every publish;
- nan: publishes NaN. The sender-side encoder refuses non-finite vectors, so the node
  never publishes; the attacker also appends a self-signed update frame full of NaN to
  every exchange body, which receivers' non-finite check must refuse (both are counted).

Attacks on the protocol rather than the parameters (the driver side is in
`simnet.attacks.peers`; these attackers publish their honest parameters unless said):
- future: the vector of attack `payload` (sign_flip by default) in frames that claim a time
  `ahead_s` ahead of the attacker's clock, so a receiver that took the sender's word would
  count them as never stale;
- join_liar: answers every hello with step `claim_step` and every state request with its
  parameters plus noise of `scale` × their rms (1e30 for a `scale` of ~1e30), signed and well
  formed: bait for joiners that adopt the furthest-along state;
- sybil: sends `sybil_rate` control-only exchanges per second, each from a fresh key and
  naming a fresh made-up listen address, to bait peers into adopting those addresses;
- leech: sends `leech_rate` first contacts per second, each from a fresh key, and spends each
  answer's ticket asking for the whole model (`simnet.attacks.leech`);
- slot_sybil: answers every hello and exchange promptly and never carries a frame of its copy,
  to hold partner slots that bring nothing (`simnet.attacks.peers.SlotSybilPeer`).

`pushy = true` with any parameter attack: the attacker starts an exchange with every partner
it has at every publish (as many pulls as partners), so under a rule where any copy with news
pulls, every honest peer mixes its lie every period; `pushy_undefended` is that arm's control,
in which the honest peers let pushed copies pull (`GossipConfig.pull_only = false`).

`undefended = true` is the control arm of the attacks in `CONTROLLED`: the honest peers of that run drop
the one defence the attack targets (see `simnet.attacks.peers`). It is a simnet switch for
experiments; no peer setting turns these defences off.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Callable

import torch

from peer.trainer import Capabilities, Trainer, WrappedTrainer

KINDS = ("none", "sign_flip", "scale", "random", "alie", "edge", "nan", "steer", "future", "join_liar", "sybil",
         "leech", "slot_sybil")
CONTROLLED = ("future", "join_liar", "sybil", "leech", "slot_sybil")
"""Attacks with an `undefended` control arm."""
PAYLOADS = ("sign_flip", "scale", "random", "alie", "edge", "steer")
"""What a `future` attacker may publish."""


@dataclass
class AttackConfig:
    kind: str = "none"
    """One of KINDS (see the module docstring)."""
    fraction: float = 0.0
    """Share of peers that attack (rounded to the nearest count), chosen by the seed."""
    peers: list[int] = field(default_factory=list)
    """Explicit attacker indices (instead of `fraction`)."""
    scale: float = 1.0
    """s of sign_flip / scale / random / future; edge's distance in radii; the noise of join_liar's offered state."""
    z: float = 1.0
    """z of ALIE."""
    growth: float = 1.25
    """steer: factor by which the published distance grows at every publish."""
    payload: str = "sign_flip"
    """future: the attack whose vector it publishes (one of PAYLOADS)."""
    ahead_s: float = 290.0
    """future: how far ahead of the attacker's clock its frames claim to be. Receivers refuse
    frames more than their max_clock_skew_s (300 s) ahead, so the most a liar can claim and
    still be heard is a little under that."""
    claim_step: int = 10**9
    """join_liar: the step it claims in hellos and in the state it offers."""
    sybil_rate: float = 20.0
    """sybil: control-only exchanges per second from each attacker, each from a fresh key."""
    leech_rate: float = 50.0
    """leech: first contacts per second from each attacker, each from a fresh key (each followed by
    one request spending the ticket its answer offers)."""
    mixes: bool = True
    """False: the attacker ignores what it receives, so the vector it lies with follows its own
    training alone instead of the swarm's (a sign flip then points away from the honest copies)."""
    undefended: bool = False
    """Control arm of future, join_liar, sybil, leech and slot_sybil: honest peers drop the defence it targets."""
    pushy: bool = False
    """The attacker exchanges with every partner it has at every publish (module docstring)."""
    pushy_undefended: bool = False
    """Control arm of `pushy`: honest peers let every copy with news pull, pushed ones too."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"attack.kind must be one of {KINDS}, got {self.kind!r}")
        if self.undefended and self.kind not in CONTROLLED:
            raise ValueError(f"attack.undefended is a control arm of {CONTROLLED}, not of {self.kind!r}")
        if self.payload not in PAYLOADS:
            raise ValueError(f"attack.payload must be one of {PAYLOADS}, got {self.payload!r}")
        if (self.pushy or self.pushy_undefended) and self.kind not in PAYLOADS:
            raise ValueError(f"attack.pushy needs a parameter attack (one of {PAYLOADS}), not {self.kind!r}")
        if self.pushy_undefended and not self.pushy:
            raise ValueError("attack.pushy_undefended is the control arm of attack.pushy")
        if not 0 <= self.ahead_s or self.claim_step < 1 or not self.sybil_rate > 0 or not self.leech_rate > 0:
            raise ValueError("attack.ahead_s must be >= 0, claim_step >= 1, sybil_rate and leech_rate > 0")
        if not 0 <= self.fraction < 1:
            raise ValueError(f"attack.fraction must be in [0, 1), got {self.fraction}")
        if any(p < 0 for p in self.peers):
            raise ValueError("attack.peers must be peer indices >= 0")
        self.peers = [int(p) for p in self.peers]

    def attackers(self, n: int, seed: int) -> set[int]:
        """Which peers attack (none when kind is 'none')."""
        if self.kind == "none":
            return set()
        if self.peers:
            return {p for p in self.peers if p < n}
        k = int(round(self.fraction * n))
        return set(random.Random(f"simnet-attackers:{seed}").sample(range(n), k))


class AttackTrainer(WrappedTrainer):
    """Wraps an honest Trainer; `get_flat_params` returns the attack vector, and every other call
    goes to the honest trainer."""

    def __init__(self, inner: Trainer, cfg: AttackConfig, seed: int) -> None:
        super().__init__(inner)
        self.cfg = cfg
        self.x0 = inner.get_flat_params()
        self.gen = torch.Generator().manual_seed(seed)
        self._peek: Callable[[], list[torch.Tensor]] = lambda: []
        self._armed = False  # off until the node is built: its public copy starts from the shared x₀ like everyone's
        self._shown: torch.Tensor | None = None
        self._steer: float | None = None
        self._direction: torch.Tensor | None = None

    @property
    def capabilities(self) -> Capabilities:
        """The honest trainer's, but a mix goes through `set_flat_params` (it undoes the attack)."""
        return dataclasses.replace(self.inner.capabilities, add_in_place=False)

    add_to_flat_params = Trainer.add_to_flat_params

    def arm(self, peek: Callable[[], list[torch.Tensor]]) -> None:
        """Start lying, reading the copies the node holds through `peek` (alie and edge use them)."""
        self._peek, self._armed = peek, True

    # --- what gossip sees ------------------------------------------------------------
    def get_flat_params(self) -> torch.Tensor:
        x = self.inner.get_flat_params()
        if not self._armed:
            return x
        self._shown = self._attack(x)
        return self._shown.clone()

    def set_flat_params(self, flat: torch.Tensor) -> None:
        """Apply the mixing delta (new − what we showed) to the honest parameters (unless it does not mix)."""
        if self._shown is None:
            self.inner.set_flat_params(flat)
            return
        if not self.cfg.mixes:
            self._shown = None
            return
        delta = flat - self._shown
        delta = torch.where(torch.isfinite(delta), delta, torch.zeros_like(delta))
        self.inner.set_flat_params(self.inner.get_flat_params() + delta)
        self._shown = None

    def adopt(self, flat: torch.Tensor, step: int) -> None:
        self._shown = None  # what we showed before is no longer what we hold
        self.inner.adopt(flat, step)

    def _attack(self, x: torch.Tensor) -> torch.Tensor:
        kind, s = self.cfg.kind, self.cfg.scale
        if kind == "future":
            kind = self.cfg.payload
        if kind == "sign_flip":
            return self.x0 - s * (x - self.x0)
        if kind == "scale":
            return self.x0 + s * (x - self.x0)
        if kind == "random":
            rms = float(x.pow(2).mean().sqrt()) or 1.0
            return x + s * rms * torch.randn(x.shape, generator=self.gen)
        if kind == "alie":
            stack = torch.stack([x] + [c for c in self._peek() if c.shape == x.shape])
            if len(stack) < 2:
                return x
            return stack.mean(0) - self.cfg.z * stack.std(0)
        if kind == "edge":
            distances = sorted(float((c - x).norm()) for c in self._peek() if c.shape == x.shape)
            u = x - self.x0
            if not distances or not float(u.norm()) > 0:
                return x
            return x - s * distances[(len(distances) - 1) // 2] * u / u.norm()
        if kind == "nan":
            return torch.full_like(x, float("nan"))
        if kind == "steer":
            if self._direction is None:
                e = torch.randn(x.shape, generator=self.gen)
                self._direction = e / e.norm()
                self._steer = s * (float(x.pow(2).mean().sqrt()) or 1.0) * x.numel() ** 0.5 * 0.01
            self._steer *= self.cfg.growth
            return x + min(self._steer, 1e30) * self._direction
        return x
