"""Updates kept as the entries their codec chose: the same numbers, bit for bit, as the expanded
vector, whichever codec made them, and a decoded update that never grew to the model's size."""

from __future__ import annotations

import math

import pytest
import torch

from protocol import SparseVector, VerifyPolicy, decode_frame, flat_model_spec, make_update_frame, parse_codec
from protocol.identity import Identity
from tests.unit.protocol.test_codecs import ALL_SPECS, bits, heavy_tailed

NOW = 1.7e9


@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("n", [0, 1, 257, 100_003])
def test_the_kept_entries_are_the_expanded_vector_bit_for_bit(spec: str, n: int) -> None:
    codec = parse_codec(spec)
    x = heavy_tailed(n, seed=n + 1)
    packed, rebuilt = codec.compress_sparse(x, seed=5)
    dense = codec.decompress(packed, n, seed=5)
    assert torch.equal(bits(rebuilt.dense()), bits(dense))
    assert torch.equal(bits(codec.decompress_sparse(packed, n, seed=5).dense()), bits(dense))
    assert torch.equal(bits(codec.compress(x, seed=5)[1]), bits(dense))
    base = heavy_tailed(n, seed=n + 2)
    assert torch.equal(bits(rebuilt.added_to(base)), bits(base + dense))
    assert rebuilt.norm() == pytest.approx(float(torch.linalg.vector_norm(dense)), rel=1e-6)
    if spec.startswith(("topk", "randk")):
        assert rebuilt.kept == codec.k(n) and rebuilt.indices is not None
    else:
        assert rebuilt.indices is None and rebuilt.kept == n


def test_adding_writes_nothing_it_was_given() -> None:
    x = torch.arange(6, dtype=torch.float32)
    v = SparseVector(6, torch.tensor([10.0, 20.0]), torch.tensor([1, 4]))
    y = v.added_to(x)
    assert y.tolist() == [0.0, 11.0, 2.0, 3.0, 24.0, 5.0]
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert v.dense().tolist() == [0.0, 10.0, 0.0, 0.0, 20.0, 0.0]
    assert v.norm() == pytest.approx(math.hypot(10.0, 20.0))


def test_finiteness_is_read_where_the_vector_sets_entries() -> None:
    v = SparseVector(4, torch.tensor([3e38]), torch.tensor([2]))
    x = torch.tensor([float("inf"), 0.0, 3e38, 0.0])  # not finite at 0, where v sets nothing
    y = v.added_to(x)
    assert v.all_finite() and not v.finite_where_set(y)  # 3e38 + 3e38 overflowed at 2
    assert v.finite_where_set(torch.tensor([float("inf"), 0.0, 1.0, 0.0]))
    assert not SparseVector(2, torch.tensor([1.0, float("nan")])).all_finite()
    assert math.isfinite(SparseVector(2, torch.tensor([3e38, 3e38])).norm())  # float64 past float32's range


def test_the_largest_magnitude_is_read_from_the_kept_values() -> None:
    assert SparseVector(5, torch.tensor([2.0, -7.5]), torch.tensor([1, 3])).max_abs() == 7.5
    assert SparseVector(5, torch.zeros(0), torch.zeros(0, dtype=torch.int64)).max_abs() == 0.0
    assert SparseVector(2, torch.tensor([1.0, float("nan")])).max_abs() == math.inf
    assert SparseVector(2, torch.tensor([-float("inf"), 0.0])).max_abs() == math.inf


@pytest.mark.parametrize("make, match", [
    (lambda: SparseVector(3, torch.zeros(2)), "dense vector holds all 3"),
    (lambda: SparseVector(3, torch.zeros(2, dtype=torch.float64), torch.tensor([0, 1])), "float32"),
    (lambda: SparseVector(3, torch.zeros(2), torch.tensor([0, 1], dtype=torch.int32)), "int64"),
    (lambda: SparseVector(3, torch.zeros(2), torch.tensor([0])), "as many as the values"),
    (lambda: SparseVector(3, torch.zeros(3)).added_to(torch.zeros(4)), "3 entries to one of 4"),
])
def test_malformed_vectors_are_refused_with_the_reason(make, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_a_decoded_top_k_update_holds_its_k_entries_and_expands_only_when_asked() -> None:
    n, identity = 100_000, Identity.generate(b"\x01" * 32)
    delta = heavy_tailed(n, seed=3)
    frame, rebuilt = make_update_frame(identity, swarm="s", fingerprint="f" * 64, seq=1, step=0, timestamp=NOW,
                                       codec="topk:0.01+int8", delta=delta)
    got = decode_frame(frame, VerifyPolicy("s", "f" * 64, model_spec=flat_model_spec(n)), NOW)
    part = got.parts["delta"]
    assert part.kept == 1000 and part.numel == n
    assert "tensors" not in vars(got)  # nothing expanded yet
    assert torch.equal(bits(got.tensors["delta"]), bits(rebuilt.dense()))


@pytest.mark.parametrize("kept", [1, 131_071, 131_072, 300_001])
def test_into_a_bfloat16_copy_each_entry_is_summed_in_float32_and_rounded_once(kept: int) -> None:
    """A piece at a time (the kept entries can be nearly all of a large model): the same bits as
    the whole sum, across the pieces' edges."""
    n = 400_003
    x = heavy_tailed(n, seed=3).to(torch.bfloat16)
    at = torch.sort(torch.randperm(n, generator=torch.Generator().manual_seed(kept))[:kept]).values
    v = SparseVector(n, heavy_tailed(kept, seed=4), at)
    want = x.clone()
    want[at] = (x[at].to(torch.float32) + v.values).to(torch.bfloat16)
    got = v.added_to(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), want.view(torch.int16))
    dense = SparseVector.of_dense(heavy_tailed(n, seed=5))
    assert torch.equal(dense.added_to(x).view(torch.int16), (x.to(torch.float32) + dense.values).to(torch.bfloat16).view(torch.int16))
