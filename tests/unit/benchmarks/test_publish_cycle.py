"""The publish-period benchmark times each stage on real nodes, holding as many neighbour copies
as asked (the two it pulls and, with `--held`, more that only the averaged weights read), and
reports the memory each stage's temporaries take."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
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


@pytest.mark.skipif(pc.rss_peak_reset() is None, reason="needs Linux's /proc/self/clear_refs to reset the peak")
def test_each_stage_reports_the_temporaries_it_allocates() -> None:
    """In a process whose large blocks are given back when freed (scale.py's children): the step
    boundary's parameter copy (bfloat16: partner steps are off, so the node keeps no parameters)
    is half a float32 copy and a dense publish's reconstruction of its update (the float32 vector
    receivers rebuild; the residual is taken in the boundary's copy) a whole one, each seen in the
    stage that allocates it."""
    n = 2_000_000
    code = (f"import sys, json; sys.path[:0] = [{str(REPO / 'benchmarks')!r}, {str(REPO)!r}]\n"
            "import torch, publish_cycle as pc\n"
            "torch.set_num_threads(1)\n"
            f"out = pc.measure({n}, 2, 'int8', add_in_place=True, partner_steps=0.0)\n"
            "print(json.dumps(out['peaks']))")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    copies = {name: size / (4 * n) for name, size in json.loads(done.stdout.splitlines()[-1]).items()}
    assert set(copies) == {"boundary", "publish", "request x2", "ingest x2", "serve x2"}
    assert 0.45 <= copies["boundary"] < 0.75  # the bfloat16 copy of the parameters handed to the publish
    assert copies["publish"] >= 0.95  # at least the dense reconstruction of the update
    assert copies["request x2"] < 0.5  # a control frame: no parameter-sized work
