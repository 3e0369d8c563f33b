"""Byzantine peers: a Trainer wrapper whose parameters — what GossipNode publishes — lie.

The attacker runs the real peer core over the real wire; only the vector its node reads
from the trainer is manipulated, so the attack travels in genuine signed frames and the
honest side defends with exactly the code it runs in production. The attacker still
trains honestly and, unless `mixes = false`, mixes in what it receives (the mixing delta is
applied to its honest parameters), so it stays close to the swarm, as a careful adversary would.

The attacks, each with the lie it publishes and the peers it runs, are the table in
`simnet.attacks.kinds` (docs/simnet/world.md); the lies themselves are `simnet.attacks.lies`.

`pushy = true` with any parameter attack: the attacker starts an exchange with every partner
it has at every publish (as many pulls as partners), so under a rule where any copy with news
pulls, every honest peer mixes its lie every period; `pushy_undefended` is that arm's control,
in which the honest peers let pushed copies pull (`GossipConfig.pull_only = false`).

`undefended = true` is the control arm of the attacks that name one: the honest peers of that run drop
the one defence the attack targets (see `simnet.attacks.peers`). It is a simnet switch for
experiments; no peer setting turns these defences off.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from peer.trainer import Capabilities, Trainer, WrappedTrainer
from simnet.attacks.kinds import NONE, attack_named, controlled, kind_names, parameter_attacks
from simnet.attacks.lies import Lie


@dataclass
class AttackConfig:
    kind: str = "none"
    """An attack of the table (`simnet.attacks.kinds`), or "none"."""
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
    """future: the parameter attack whose lie it publishes (`simnet.attacks.kinds.parameter_attacks`)."""
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
    """Control arm of an attack that names one (`AttackKind.control`): honest peers drop the defence it targets."""
    pushy: bool = False
    """The attacker exchanges with every partner it has at every publish (module docstring)."""
    pushy_undefended: bool = False
    """Control arm of `pushy`: honest peers let every copy with news pull, pushed ones too."""

    def __post_init__(self) -> None:
        if self.kind not in kind_names():
            raise ValueError(f"attack.kind must be one of {kind_names()}, got {self.kind!r}")
        if self.undefended and self.kind not in controlled():
            raise ValueError(f"attack.undefended is a control arm of {controlled()}, not of {self.kind!r}")
        if self.payload not in parameter_attacks():
            raise ValueError(f"attack.payload must be one of {parameter_attacks()}, got {self.payload!r}")
        if (self.pushy or self.pushy_undefended) and self.kind not in parameter_attacks():
            raise ValueError(f"attack.pushy needs a parameter attack (one of {parameter_attacks()}), not {self.kind!r}")
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
        if self.kind == NONE:
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
        self._gen = torch.Generator().manual_seed(seed)
        kind = attack_named(cfg.kind)
        if kind is not None and kind.publishes_payload:
            kind = attack_named(cfg.payload)
        self._lie_of: Optional[Callable[[Lie, torch.Tensor], torch.Tensor]] = kind.lie if kind else None
        self._lie: Optional[Lie] = None  # none until the node is built: its public copy starts from the shared x₀ like everyone's
        self._shown: torch.Tensor | None = None

    @property
    def capabilities(self) -> Capabilities:
        """The honest trainer's, but a mix goes through `set_flat_params` (it undoes the attack)."""
        return dataclasses.replace(self.inner.capabilities, add_in_place=False)

    add_to_flat_params = Trainer.add_to_flat_params

    def arm(self, peek: Callable[[], list[torch.Tensor]]) -> None:
        """Start lying, reading the copies the node holds through `peek` (alie and edge use them)."""
        self._lie = Lie(self.x0, self.cfg.scale, self.cfg.z, self.cfg.growth, self._gen, peek)

    # --- what gossip sees ------------------------------------------------------------
    def get_flat_params(self) -> torch.Tensor:
        x = self.inner.get_flat_params()
        if self._lie is None:
            return x
        self._shown = self._attack(x)
        return self._shown.clone()

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        """The vector `get_flat_params` shows (the attack, once armed), rounded as `Trainer`'s default
        does, from its float32 copy: the lie is built in float32, and so no faster path exists."""
        return Trainer.flat_params_bf16(self, generator, device)

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
        assert self._lie is not None  # armed
        return x if self._lie_of is None else self._lie_of(self._lie, x)
