"""benchmarks/lockstep_peers.py: its arms draw the same batches and differ only where they say."""

from __future__ import annotations

import sys

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from lockstep_peers import alone, ddp, gossip  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402

from peer.core.gossip_config import GossipConfig  # noqa: E402

SMALL = MLPWorkload(in_dim=8, hidden=16, out_dim=4, batch_size=32, eval_samples=64, seed=3)
STEPS = 12


def test_one_replica_alone_is_ddp_of_one_process_step_for_step() -> None:
    assert alone(SMALL, 1, STEPS) == ddp(SMALL, 1, STEPS)  # same model, same batches, same optimiser


def test_mixing_changes_the_run_and_late_copies_change_it_again() -> None:
    cfg = GossipConfig(swarm="t")
    on_time, _ = gossip(SMALL, 3, STEPS, cfg, late=False)
    late, _ = gossip(SMALL, 3, STEPS, cfg, late=True)
    assert len({alone(SMALL, 3, STEPS), on_time, late}) == 3
    assert gossip(SMALL, 3, STEPS, cfg, late=False)[0] == on_time  # deterministic from the seed
