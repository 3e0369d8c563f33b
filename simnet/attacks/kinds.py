"""Every simnet attack in one table: what it does, the lie its trainer publishes, the peer it runs and
its control arm.

`AttackConfig` validates against it, `AttackTrainer` publishes an entry's lie, `build_peer` builds its
peers and docs/simnet/world.md shows it (`python -m simnet.attacks.kinds`), so an attack is an entry
here plus, for an attack on the protocol, its peer classes. Peers are named by `module:Class`
because they are built on `AttackConfig`, which reads this table: the names are resolved when a
swarm is built (`simnet.attacks.build`), and a test resolves every one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from simnet.attacks.lies import Lie

__all__ = ["AttackKind", "ATTACKS", "NONE", "register", "attack_named", "kind_names", "parameter_attacks",
           "controlled", "markdown_table"]

NONE = "none"
"""The kind of a run without attackers."""
PEERS, LEECH = "simnet.attacks.peers", "simnet.attacks.leech"


@dataclass(frozen=True)
class AttackKind:
    """One attack."""

    name: str
    about: str
    """What the attacker does, in a sentence (docs/simnet/world.md's table)."""
    lie: Optional[Callable[[Lie, torch.Tensor], torch.Tensor]] = None
    """What its trainer shows its node instead of x; None: its honest parameters."""
    publishes_payload: bool = False
    """It publishes the lie of the parameter attack `attack.payload` names instead of its own."""
    peer: str = ""
    """`module:Class` of the `AttackerPeer` it runs when it changes more than the trainer; "": `AttackerPeer`."""
    control: str = ""
    """`module:Class` of the honest peer of its `undefended` control arm, built without the one
    defence it targets; "": it has none."""
    control_about: str = ""
    """What that control arm's honest peer does differently."""

    @property
    def on_parameters(self) -> bool:
        """A lie in the parameters alone, sent by a plain `AttackerPeer`: what `future` may publish
        (`attack.payload`) and what `pushy` attackers push."""
        return self.lie is not None and not self.peer


ATTACKS: list[AttackKind] = [
    AttackKind("sign_flip", "publishes x₀ − s·u: its progress u = x − x₀ with the sign flipped, scaled by s",
               Lie.sign_flip),
    AttackKind("scale", "publishes x₀ + s·u (model-replacement style boosting)", Lie.scaled),
    AttackKind("random", "publishes x + s·rms(x)·ε, ε ~ N(0, I) fresh at every read", Lie.random),
    AttackKind("alie", "\"A Little Is Enough\" (Baruch et al. 2019): μ − z·σ of the copies it holds (its own "
               "and its neighbours'), coordinate-wise, small enough to pass distance checks", Lie.alie),
    AttackKind("edge", "the attacker who knows the clipping rule: x − r·u/‖u‖, straight back along its "
               "progress, at r = s × its median distance to the copies it holds (what receivers' radius is "
               "made of)", Lie.edge),
    AttackKind("nan", "publishes NaN: its own encoder refuses that (`publish_failures`), so its node also "
               "appends a self-signed NaN update frame to every exchange body, which receivers refuse "
               "(`non_finite`)", Lie.nan, peer=f"{PEERS}:NanPeer"),
    AttackKind("steer", "radius steering: x + d·e, e a fixed random unit direction, d from 1% of s·‖x‖ growing "
               "by `growth` at every read, so against a radius taken from recent distances it owns the "
               "window and drags the radius along", Lie.steer),
    AttackKind("future", "publishes the lie of `payload` (sign_flip) in frames claiming a time `ahead_s` ahead "
               "of its clock, to be counted as never stale", publishes_payload=True, peer=f"{PEERS}:FuturePeer",
               control=f"{PEERS}:TimestampTrustingPeer",
               control_about="takes a frame's claimed timestamp as its publish time"),
    AttackKind("join_liar", "claims step `claim_step` in every hello and serves its parameters plus noise of "
               "s × their rms, signed and well formed: bait for joiners", peer=f"{PEERS}:JoinLiarPeer",
               control=f"{PEERS}:UnprobingPeer", control_about="adopts the furthest-along state without probing it"),
    AttackKind("sybil", "sends `sybil_rate` control-only exchanges a second, each from a fresh key naming a "
               "made-up listen address", peer=f"{PEERS}:SybilPeer", control=f"{PEERS}:UnverifyingPeer",
               control_about="takes an inbound exchange's listen address as verified at once"),
    AttackKind("leech", "sends `leech_rate` first contacts a second, each from a fresh key, and spends each "
               "answer's ticket asking for the whole model", peer=f"{LEECH}:LeechPeer",
               control=f"{LEECH}:SnapshotsToAnyonePeer", control_about="answers every asker with a snapshot"),
    AttackKind("slot_sybil", "answers every hello and exchange at once and never carries a frame of its copy, "
               "to hold partner slots that bring nothing", peer=f"{PEERS}:SlotSybilPeer",
               control=f"{PEERS}:UnscoringPeer",
               control_about="its session is not told what answers carried, so an empty partner keeps its slot"),
]
"""Every attack, in the order docs list them."""


def register(kind: AttackKind) -> None:
    """Add an attack; its name must be new."""
    if kind.name == NONE or attack_named(kind.name) is not None:
        raise ValueError(f"attack kind {kind.name!r} is already registered")
    ATTACKS.append(kind)


def attack_named(name: str) -> Optional[AttackKind]:
    """The attack of that name; None for none (and for `NONE`)."""
    return next((kind for kind in ATTACKS if kind.name == name), None)


def kind_names() -> tuple[str, ...]:
    """What `attack.kind` may name."""
    return (NONE, *(kind.name for kind in ATTACKS))


def parameter_attacks() -> tuple[str, ...]:
    """What `attack.payload` may name and `attack.pushy` needs (`AttackKind.on_parameters`)."""
    return tuple(kind.name for kind in ATTACKS if kind.on_parameters)


def controlled() -> tuple[str, ...]:
    """The attacks with an `undefended` control arm."""
    return tuple(kind.name for kind in ATTACKS if kind.control)


def markdown_table() -> str:
    """docs/simnet/world.md's table of attacks (a test keeps the page equal to it)."""
    rows = ["| `attack.kind` | what the attackers do | `undefended`: the honest peers |", "|---|---|---|"]
    rows += [f"| `{kind.name}` | {kind.about} | {kind.control_about or '—'} |" for kind in ATTACKS]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
