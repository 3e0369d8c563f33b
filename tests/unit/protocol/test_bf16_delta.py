"""A bfloat16 delta encodes as its float32 widening does, bit for bit, in every codec of the table,
and without a float32 copy of the whole delta."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from protocol import Identity, make_step_update_frame, make_update_frame, parse_codec
from protocol import codec_input, codecs_dense, codecs_sparse, elias_fano, finite
from protocol.codec_table import KINDS
from protocol.sparse import SparseVector
from tests.paths import REPO

A = Identity.generate(b"\x0b" * 32)
FRAME = dict(swarm="s", fingerprint="f" * 64, seq=7, step=3, timestamp=1.7e9)
DENSE = [kind.name for kind in KINDS if not kind.sparse] + ["int8:block=7"]
SPECS = DENSE + [f"{kind.name}:{fraction}+{values}" for kind in KINDS if kind.sparse
                 for fraction in ("0.1", "1") for values in DENSE]
"""Every codec of the table, and each sparse one over every dense one, keeping a tenth and all."""
BF16_MAX = float(torch.finfo(torch.bfloat16).max)


def deltas(n: int, seed: int) -> dict[str, torch.Tensor]:
    """bfloat16 vectors: Gaussian, magnitudes over many decades with the edges of every value codec
    (past fp16's range, bf16's largest, subnormals, signed zeros), heavy ties, and zeros."""
    g = torch.Generator().manual_seed(seed)
    gauss = torch.randn(n, generator=g) * 1e-3
    wide = gauss * torch.exp(4 * torch.randn(n, generator=g))
    edges = torch.tensor([BF16_MAX, -BF16_MAX, 7e4, 65504.0, -65536.0, 1e-40, -1e-39, 0.0, -0.0, 3e38])
    at = torch.randint(0, max(n, 1), (n // 50,), generator=g)
    wide[at] = edges[torch.randint(0, edges.numel(), (at.numel(),), generator=g)]
    ties = torch.randint(-3, 4, (n,), generator=g) * 0.5
    return {name: x.to(torch.bfloat16) for name, x in
            (("gauss", gauss), ("wide", wide), ("ties", ties), ("zeros", torch.zeros(n)))}


def same_recon(a: SparseVector, b: SparseVector) -> bool:
    if a.numel != b.numel or (a.indices is None) != (b.indices is None):
        return False
    same_at = a.indices is None or torch.equal(a.indices, b.indices)
    return same_at and torch.equal(a.values.view(torch.int32), b.values.view(torch.int32))


def outcome(fn) -> tuple:
    """What a call gave: its packed arrays and reconstruction as bytes, or the error it raised."""
    try:
        packed, recon = fn()
    except Exception as exc:  # noqa: BLE001 - the very error is what is compared
        return ("raised", type(exc), str(exc))
    arrays = tuple((name, a.dtype.str, a.tobytes()) for name, a in sorted(packed.items()))
    at = None if recon.indices is None else recon.indices.numpy().tobytes()
    return arrays, recon.numel, recon.values.numpy().tobytes(), at


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every piece constant small (and none a multiple of another), so short vectors run many pieces."""
    monkeypatch.setattr(codec_input, "PIECE", 1000)
    monkeypatch.setattr(codecs_dense, "_INT8_PIECE", 1024)
    monkeypatch.setattr(codecs_sparse, "TOPK_SAMPLED_MIN", 2048)
    monkeypatch.setattr(codecs_sparse, "_TOPK_SAMPLE", 256)
    monkeypatch.setattr(codecs_sparse, "_TOPK_CHUNK", 999)
    monkeypatch.setattr(codecs_sparse, "_TOPK_ONE_PASS_MAX", 3000)
    monkeypatch.setattr(codecs_sparse, "_ORDER_SAMPLE", 64)
    monkeypatch.setattr(elias_fano, "_EF_ROWS", 16)
    monkeypatch.setattr(elias_fano, "_EF_BITS", 23)
    monkeypatch.setattr(finite, "_PIECE", 333)


@pytest.mark.parametrize("spec", SPECS)
def test_frames_and_reconstructions_equal_the_float32_ones(spec: str, small_pieces: None) -> None:
    for n in (0, 1, 7, 1000, 4099, 20_011):
        for kind, delta in deltas(n, seed=n).items():
            before = delta.clone()
            frame, recon = make_update_frame(A, codec=spec, delta=delta, **FRAME)
            want_frame, want = make_update_frame(A, codec=spec, delta=delta.to(torch.float32), **FRAME)
            assert frame == want_frame, (n, kind)
            assert same_recon(recon, want), (n, kind)
            assert torch.equal(delta.view(torch.int16), before.view(torch.int16))  # read, never written


@pytest.mark.parametrize("spec", ["topk:0.1+int8", "topk:0.01", "randk:0.1+bf16", "int8", "fp16", "bf16", "identity"])
@pytest.mark.parametrize("n", [70_001, 300_007])
def test_full_size_pieces_agree(spec: str, n: int) -> None:
    """The real piece constants: vectors past the sampled top-k's and the int8 and widening pieces."""
    for kind, delta in deltas(n, seed=3).items():
        codec = parse_codec(spec)
        assert outcome(lambda: codec.compress_sparse(delta, seed=9)) == \
            outcome(lambda: codec.compress_sparse(delta.to(torch.float32), seed=9)), kind


def test_step_update_frames_agree(small_pieces: None) -> None:
    d = deltas(5003, seed=1)
    frame, recon, steps = make_step_update_frame(A, codec="topk:0.1+int8", delta=d["wide"], own_step=d["gauss"],
                                                 **FRAME)
    want_frame, want, want_steps = make_step_update_frame(A, codec="topk:0.1+int8", delta=d["wide"].float(),
                                                          own_step=d["gauss"].float(), **FRAME)
    assert frame == want_frame and same_recon(recon, want) and same_recon(steps, want_steps)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_entries_are_met_as_in_float32(spec: str, bad: float, small_pieces: None) -> None:
    """Frame builders refuse them alike; a codec called directly does with them what it does with
    the float32 widening (the same arrays, or the same error)."""
    for n, position in ((1, 0), (4099, 0), (4099, 2047), (4099, 4098)):
        delta = deltas(n, seed=position)["gauss"]
        delta[position] = bad
        for x in (delta, delta.to(torch.float32)):
            with pytest.raises(ValueError, match="non-finite values"):
                make_update_frame(A, codec=spec, delta=x, **FRAME)
        codec = parse_codec(spec)
        assert outcome(lambda: codec.compress_sparse(delta, seed=2)) == \
            outcome(lambda: codec.compress_sparse(delta.to(torch.float32), seed=2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64, torch.int32])
def test_other_dtypes_are_still_refused(dtype: torch.dtype) -> None:
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        make_update_frame(A, codec="topk:0.1+int8", delta=torch.zeros(10, dtype=dtype), **FRAME)
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        parse_codec("int8").compress_sparse(torch.zeros(10, dtype=dtype))


_PEAKS = """
import json, re, sys
from pathlib import Path
import torch
from protocol import Identity, make_update_frame

def status(field):
    return int(re.search(rf"^{field}:\\s+(\\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024

torch.set_num_threads(1)
n = int(sys.argv[1])
bf16 = (torch.randn(n, generator=torch.Generator().manual_seed(0)) * 1e-3).to(torch.bfloat16)
f32 = bf16.to(torch.float32)
identity = Identity.generate(bytes(32))
rises = {}
for spec in sys.argv[2:]:
    for name, delta in (("bfloat16", bf16), ("float32", f32)):
        encode = lambda: make_update_frame(identity, swarm="s", fingerprint="f" * 64, seq=1, step=0,
                                           timestamp=1.7e9, codec=spec, delta=delta)
        encode()
        Path("/proc/self/clear_refs").write_text("5")
        base = status("VmRSS")
        frame = encode()
        rises[f"{spec} {name}"] = (status("VmHWM") - base) / (4 * n)
        del frame
print(json.dumps(rises))
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's /proc/self/clear_refs")
def test_encoding_a_bf16_delta_allocates_no_float32_copy_of_it() -> None:
    """In a process whose large blocks are given back when freed, the peak memory an encode adds,
    in float32 copies of the delta: a bfloat16 delta's is what its float32 widening's is, already
    widened (a widened copy would add one), and under a copy at the default codec."""
    n = 8_000_000  # past the one-pass top-k scan of float32 vectors: both are scanned a chunk at a time
    specs = ["topk:0.1+int8", "topk:0.01", "int8", "identity"]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _PEAKS, str(n), *specs], capture_output=True, text=True,
                          env=env, timeout=300, cwd=Path(REPO))
    assert done.returncode == 0, done.stderr[-2000:]
    rises = json.loads(done.stdout.splitlines()[-1])
    for spec in specs:
        assert rises[f"{spec} bfloat16"] < rises[f"{spec} float32"] + 0.2, (spec, rises)
    assert rises["topk:0.1+int8 bfloat16"] < 0.8, rises
