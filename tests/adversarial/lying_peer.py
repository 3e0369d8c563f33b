"""`gossip-tts peer` whose parameters lie: the real command, settings, node and wire, with the
trainer wrapped in simnet's `AttackTrainer` so that what its node publishes is the attack.

    python -m tests.adversarial.lying_peer [--kind steer] [--growth 1.25] [--attack-seed 0]
        [--from-step 0] peer ARGS...

takes every argument of `gossip-tts peer` after `peer`. Kind "none" is the honest control: the
same process and code path, publishing what it trains. The lie starts at the first step boundary
at or past `--from-step` where the node holds a neighbour's copy (a liar gains nothing by
lying to nobody), and the log says so ("lying from step N"). The liar trains honestly and
mixes what it pulls (simnet.attacks.trainer), so it stays close to its victims.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from gossip_tts.apps import peer_app
from gossip_tts.cli.main import main as gossip_tts_main
from peer.local.loop import StepHook
from peer.runtime import GossipPeer
from peer.startup import build_parts
from peer.trainer import Trainer
from simnet.attacks.kinds import kind_names
from simnet.attacks.trainer import AttackConfig, AttackTrainer


def lying_peer_builder(attack: AttackConfig, seed: int, from_step: int) -> Callable[..., GossipPeer]:
    """`peer.startup.build_peer` for a peer whose trainer is wrapped in the attack."""

    class LyingPeer(GossipPeer):
        def make_hook(self) -> StepHook:
            """The boundary hook, armed first once a neighbour's copy is held (the node now holds the shared start)."""
            hook, view_slot, lying = super().make_hook(), self.node.view_slot, self.trainer
            armed = False

            def arm_then_hook(trainer: Trainer, stats: Any) -> None:
                nonlocal armed
                if not armed and stats.step >= from_step and view_slot.current.copies:
                    lying.arm(lambda: [c.x_hat for c in view_slot.current.copies])
                    armed = True
                    self.emit(f"lying from step {stats.step} ({attack.kind})")
                hook(trainer, stats)

            return arm_then_hook

    def build(trainer: Trainer, *args: Any, **kwargs: Any) -> GossipPeer:
        return LyingPeer(build_parts(AttackTrainer(trainer, attack, seed=seed), *args, **kwargs))

    return build


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.adversarial.lying_peer")
    parser.add_argument("--kind", choices=kind_names(), default="steer")
    parser.add_argument("--growth", type=float, default=AttackConfig.growth)
    parser.add_argument("--scale", type=float, default=AttackConfig.scale)
    parser.add_argument("--attack-seed", type=int, default=0)
    parser.add_argument("--from-step", type=int, default=0)
    if "peer" not in argv:
        parser.error("the `gossip-tts peer` arguments follow `peer`")
    split = argv.index("peer")
    ours = parser.parse_args(argv[:split])
    attack = AttackConfig(kind=ours.kind, growth=ours.growth, scale=ours.scale)
    peer_app.build_peer = lying_peer_builder(attack, ours.attack_seed, ours.from_step)  # what `peer_app.run` builds
    gossip_tts_main(argv[split:], prog_name="gossip-tts")


if __name__ == "__main__":
    main(sys.argv[1:])
