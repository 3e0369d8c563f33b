"""benchmarks/adam_partner_gradients.py: its arms differ only where they say they do."""

from __future__ import annotations

import sys

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from adam_partner_gradients import Arm, run_arm  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

SMALL = MLPWorkload(in_dim=8, hidden=16, out_dim=4, batch_size=32, eval_samples=64, seed=3)


def loss(arm: Arm) -> float:
    return run_arm(arm, SMALL, steps=12, every=4, gamma=0.5)


def test_a_partner_gradient_of_weight_zero_is_the_mix_alone() -> None:
    mix = loss(Arm("mix", mix=True))
    assert loss(Arm("stale, w 0", mix=True, weight=0.0, fresh=False)) == mix
    assert loss(Arm("fresh, w 0", mix=True, weight=0.0)) == mix


def test_partner_gradients_and_mixing_each_change_the_run() -> None:
    mix = loss(Arm("mix", mix=True))
    assert loss(Arm("alone")) != mix
    fresh, stale = loss(Arm("fresh", mix=True, weight=1.0)), loss(Arm("stale", mix=True, weight=1.0, fresh=False))
    older = loss(Arm("older", mix=True, weight=1.0, fresh=False, periods_old=2))
    assert len({mix, fresh, stale, older}) == 4
