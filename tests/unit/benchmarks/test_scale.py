"""benchmarks/scale.py: its census counts every storage a node holds once, and a run at a tiny
size gives every figure its report and extrapolation read."""

from __future__ import annotations

import sys

import torch

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import scale  # noqa: E402


def test_the_census_counts_a_shared_storage_once_and_sees_bytes_and_views():
    x = torch.zeros(1000)
    holder = {"a": x, "b": x[10:20], "c": [b"\x00" * 300], "d": (torch.ones(5, dtype=torch.float64),)}
    assert scale.held_bytes(holder) == 4000 + 300 + 40
    counted: set[int] = set()
    assert scale.held_bytes({"x": x}, counted) == 4000
    assert scale.held_bytes({"again": x[:5]}, counted) == 0  # already counted under the first holder


def test_one_tiny_size_gives_every_figure_and_the_extrapolation(capsys):
    rows = [scale.child(60_000, held, periods=2, compression="topk:0.1+int8", copy_dtype="bfloat16", calibrate=held == 2)
            for held in (2, 3)]
    two, three = rows
    assert two["pass_ns"] > 0 and three["pass_ns"] is None  # only the CPU child measures a pass
    for name in (*scale.STAGES, "worker", "training"):
        assert two["ns"][name] > 0, name
    # our node: its bfloat16 public copy and two neighbour copies (half an fp32 copy each), its
    # averaged weights (three bytes a parameter), and neither the parameters of the last publish nor
    # a snapshot answered to a neighbour before it published again; the outbox within its bound
    for name in ("public", "neighbour 1", "neighbour 2"):
        assert 0.49 < two["by_attribute"][name] < 0.51, name
    assert 0.74 < two["by_attribute"]["average"] < 0.76
    assert "last_x" not in two["by_attribute"] and "snapshots" not in two["by_attribute"]
    assert two["by_attribute"].get("outbox", 0.0) <= 0.26
    assert 1.75 < two["census_copies"] <= 2.5
    assert 0.45 < three["census_copies"] - two["census_copies"] < 0.55  # a further neighbour: half a copy
    assert two["wire_bytes"] > 0
    out = scale.report(rows, [2, 3])
    assert 0.45 < out["per_neighbour_copies"] < 0.55
    for preset in scale.PRESETS:
        figures = out["presets"][preset]
        assert figures["cpu_s"] > 0 and figures["ram_offload_gib"] > figures["ram_gib"] > 0
    printed = capsys.readouterr().out
    assert "extrapolated (not measured)" in printed
    passes = (two["ns"]["worker"] + two["ns"]["training"]) / two["pass_ns"]
    assert f"| one pass, c = a + b in float32 (the unit: worker + training in passes) | {two['pass_ns']:.2f} " \
           f"({passes:.0f}) |" in printed
    exact = scale.child(60_000, 2, periods=2, compression="topk:0.1+int8", copy_dtype="float32")
    # float32 copies: public, two neighbours and the last publish's parameters, one each, beside the average and outbox
    assert 4.75 < exact["census_copies"] < 5.5 and 0.99 < exact["by_attribute"]["last_x"] < 1.01
    scale.beside([two], [exact], "bfloat16", "float32")
    assert f"| 0.06M, 2 neighbours ({exact['census_copies']:.2f} copies in float32) |" in capsys.readouterr().out
