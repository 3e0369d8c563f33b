"""The publish-period benchmark times each stage on real nodes, holding as many neighbour copies
as asked (the two it pulls and, with `--held`, more that only the averaged weights read)."""

from __future__ import annotations

import sys

import torch

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import publish_cycle as pc  # noqa: E402


def test_every_stage_is_timed_and_the_copies_held_are_the_ones_asked_for() -> None:
    torch.set_num_threads(1)
    # from step 0 every publish samples the averaged weights, so each period runs every stage
    two = pc.measure(200_000, periods=3, compression="topk:0.1+int8", add_in_place=True, held=2, start_step=0)
    six = pc.measure(200_000, periods=3, compression="topk:0.1+int8", add_in_place=True, held=6, start_step=0)
    for row in (two, six):
        for stage in ("boundary", "  mix", "publish", "    codec", "    lz4 + sign", "  averaged weights", "ingest x2",
                      "  verify + decode", "serve x2", "  verify + decode ", "worker"):
            assert row[stage] > 0, stage  # a stage whose function was renamed under it would read 0
        assert row["update_bytes"] > 0 and row["wire_bytes"] > 2 * row["update_bytes"]
    assert (two["copies_held"], six["copies_held"]) == (2, 6)


def test_past_the_first_few_hundred_steps_the_averaged_weights_count_one_period_in_four() -> None:
    """Figures are means over the periods: a stage that runs in some periods only counts its share."""
    torch.set_num_threads(1)
    row = pc.measure(200_000, periods=8, compression="topk:0.1+int8", add_in_place=True, start_step=1000)
    times = row["per_period"]["  averaged weights"]  # a call that is not due returns at once
    sampled = sorted(range(8), key=times.__getitem__)[-2:]
    rest = [t for i, t in enumerate(times) if i not in sampled]
    assert len(times) == 8 and abs(sampled[0] - sampled[1]) == 4 and min(times[i] for i in sampled) > 5 * max(rest)
    assert row["  averaged weights"] == sum(times) / 8
