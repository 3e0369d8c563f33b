"""The selection benchmark's approximate control: never more than k entries (what a receiver
allows), and its rows score the exact selection as keeping all of the exact top-k's energy."""

from __future__ import annotations

import sys

import numpy as np
import torch

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import codec_selection as cs  # noqa: E402


def test_approximate_topk_keeps_at_most_k_sorted_entries_above_its_threshold() -> None:
    rng = np.random.default_rng(0)
    v = (rng.standard_t(3, 300_000) * 1e-3).astype(np.float32)
    for k in (1, 300, 30_000, 150_000):
        idx = cs.approximate_topk(v, k)
        assert 0 < idx.size <= k and (np.diff(idx) > 0).all()
        kept = np.zeros(v.size, bool)
        kept[idx] = True
        if idx.size < k:  # nothing was cut: every entry at or above the threshold is kept
            assert np.abs(v[kept]).min() >= np.abs(v[~kept]).max()
    constant = np.ones(300_000, np.float32)  # everything passes: cut to the first k
    assert cs.approximate_topk(constant, 1000).tolist() == list(range(1000))


def test_compare_rows_score_exact_against_itself() -> None:
    delta = torch.from_numpy((np.random.default_rng(1).standard_normal(200_000) * 1e-3).astype(np.float32))
    rows = {r["method"]: r for r in cs.compare(delta, "topk:0.1+int8", repeats=1)}
    assert set(rows) == {"exact, re-decoding", "exact", "approximate", "torch.topk"}
    assert rows["exact"]["kept_energy_vs_exact"] == 1.0 and rows["exact"]["kept_fraction"] == 0.1
    assert rows["exact"]["rel_error"] == rows["exact, re-decoding"]["rel_error"]
    assert 0.9 < rows["approximate"]["kept_energy_vs_exact"] <= 1.0
    assert rows["approximate"]["kept_fraction"] <= 0.1
    assert rows["torch.topk"]["encode_ms"] is None
