"""Compressed gossip with public copies (CHOCO error feedback) ends within 2% of uncompressed
gossip; the same top-k without them (error_feedback=False, the control) does clearly worse."""

import pytest
from conftest import simulate

pytestmark = pytest.mark.slow  # six 60 s swarms of 8 peers, minutes on 2 cores: run by .ci/run's slow section

WORLD = {
    "n_peers": 8, "duration_s": 60.0, "eval_every_s": 2.0, "model_args": {"lr_decay_steps": 200},
    "topology": {"kind": "random_regular", "degree": 4}, "gossip": {"gossip_every": 4},
    "session": {"max_partners": 2},  # sparse gossip: where losing the residual hurts most
}
TOPK = "topk:0.025+int8"
"""Sent as top-10% + int8 at a publish every 4 steps (peer.core.period_codec), at top-10%'s mixing rate."""
RUNS = [
    {"name": "dense", "set": {"gossip": {"compression": "identity"}}},
    {"name": "topk_ef", "set": {"gossip": {"compression": TOPK}}},
    {"name": "topk_noef", "set": {"gossip": {"compression": TOPK, "error_feedback": False}}},
]


@pytest.mark.parametrize("seed", [0, 1])
def test_public_copies_make_topk_as_good_as_dense(seed):
    s = simulate(WORLD, RUNS, [["topk_ef", "dense"], ["topk_noef", "dense"]], seed=seed)
    ef = s["ratios"]["topk_ef/dense"]["final_loss"]
    no_ef = s["ratios"]["topk_noef/dense"]["final_loss"]
    # With public copies within 2% of dense; without them clearly worse.
    assert abs(ef - 1.0) <= 0.02, ef
    assert no_ef > 1.1, no_ef
    # And it does send less (headers, signatures and the exact snapshots that start each pair weigh
    # a lot next to 676 parameters).
    assert s["runs"]["topk_ef"]["bytes_per_peer"] < 0.8 * s["runs"]["dense"]["bytes_per_peer"]
