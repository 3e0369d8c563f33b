"""The snapshot leech: strangers opening exchanges only to be sent the model (`simnet.attacks.leech`).

Two attackers send 20 first contacts a second, each from a fresh key naming the attacker's real
listen address, and spend each answer's ticket asking for the whole model. A first contact gets
a ticket and no snapshot, and a ticketed asker gets one only once the session verified its
listen address for its key, which a fresh key never is; the control answers every asker with a
snapshot, as peers did before the budget.
"""

import pytest

from conftest import simulate
from simnet.attacks.trainer import AttackConfig
from test_simnet_byzantine import WORLD


@pytest.mark.slow  # a 10-peer swarm with a leech, tens of seconds on 2 cores: run by .ci/run's slow section
def test_a_leech_gets_tickets_and_no_snapshot():
    world = {**WORLD, "n_peers": 6, "duration_s": 20.0, "attack": {"kind": "leech", "peers": [0, 1], "leech_rate": 20.0}}
    runs = [{"name": "clean", "set": {"attack": {"kind": "none"}}}, {"name": "leech"},
            {"name": "leech_trusting", "set": {"attack": {**world["attack"], "undefended": True}}}]
    s = simulate(world, runs, [["leech", "clean"], ["leech_trusting", "clean"]])
    defended, control = s["runs"]["leech"]["totals"], s["runs"]["leech_trusting"]["totals"]
    assert defended["leech_requests"] > 1000
    assert defended["leech_snapshots"] == 0
    assert defended["leech_bytes"] <= 1000 * defended["leech_requests"]  # a signed ticket, no model
    assert control["leech_snapshots"] > 0.5 * control["leech_requests"]
    assert control["leech_bytes"] >= 3 * defended["leech_bytes"]
    assert s["ratios"]["leech/clean"]["final_loss"] <= 1.05


def test_a_leech_rate_must_be_positive():
    with pytest.raises(ValueError, match="leech_rate"):
        AttackConfig(kind="leech", leech_rate=0.0)
