"""benchmarks/average_sampling.py scores each sampling against the every-step average on a
tiny workload: early on the rule samples every step, so it scores exactly as the reference."""

from __future__ import annotations

import math
import sys

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import average_sampling  # noqa: E402
from vs_workloads import MLPWorkload  # noqa: E402


def test_the_rule_equals_every_step_while_the_window_is_narrow_and_the_controls_do_not() -> None:
    w = MLPWorkload(hidden=8, batch_size=16, eval_samples=32, seed=3)
    out = average_sampling.run_seed(w, 40, {20, 40})
    assert sorted(out) == [20, 40]
    for row in out.values():
        assert set(row) == set(average_sampling.ARMS) and all(math.isfinite(v) for v in row.values())
        assert row["rule"] == 1.0  # below step 160 every step is due: the same samples
    assert out[40]["every 16"] != 1.0
