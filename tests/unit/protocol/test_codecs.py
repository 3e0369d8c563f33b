"""Tensor codecs: exact values on hand-made inputs, stated error bounds, exact reconstruction,
analytic sizes, and the spec grammar."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from protocol import CodecError, TensorCodec, parse_codec
from protocol import codecs_sparse
from protocol.codecs_sparse import ef_decode, ef_encode, ef_nbytes, randk_indices
from protocol.randk import _splitmix64

ALL_SPECS = ["identity", "fp16", "bf16", "int8", "int8:block=128", "int8:block=1",
             "topk:0.01", "topk:0.01+int8", "topk:0.1+bf16", "topk:1+fp32",
             "randk:0.01", "randk:0.01+int8", "randk:0.5+fp32"]
SIZES = [0, 1, 2, 255, 256, 257, 1000, 100_003]


def heavy_tailed(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.distributions.StudentT(torch.tensor(2.5))
    torch.manual_seed(seed)
    x = t.sample((n,)) * torch.exp(torch.randn(n, generator=g))
    return x.to(torch.float32) * 1e-3


def bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


# --- reconstruction is exact -----------------------------------------------------------

@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("n", SIZES)
def test_compress_returns_exactly_what_decompress_rebuilds(spec: str, n: int) -> None:
    codec = parse_codec(spec)
    x = heavy_tailed(n, seed=n)
    packed, recon = codec.compress(x, seed=1234)
    again = codec.decompress({k: v.copy() for k, v in packed.items()}, n, seed=1234)
    assert recon.dtype == torch.float32 and recon.shape == (n,)
    assert torch.equal(bits(recon), bits(again))
    assert sum(a.nbytes for a in packed.values()) == codec.packed_nbytes(n)
    assert isinstance(codec, TensorCodec)


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_compress_neither_mutates_nor_aliases_its_input(spec: str) -> None:
    codec = parse_codec(spec)
    x = heavy_tailed(4096, seed=3)
    before = x.clone()
    packed, recon = codec.compress(x, seed=5)
    snapshot = {k: v.copy() for k, v in packed.items()}
    assert torch.equal(x, before)
    x.mul_(7.0)
    assert all(np.array_equal(snapshot[k], packed[k]) for k in packed)
    assert torch.equal(recon, codec.decompress(packed, 4096, seed=5))


@pytest.mark.parametrize("spec,index_work", [("topk:0.1+int8", "ef_decode"), ("randk:0.1", "randk_indices")])
def test_sparse_compress_finds_its_indices_once(spec: str, index_work: str, monkeypatch) -> None:
    """The sender knows the indices it chose: decoding or drawing them again would double that cost."""
    codec = parse_codec(spec)
    x = heavy_tailed(50_000, seed=4)
    expected = codec.decompress(codec.compress(x, seed=9)[0], x.numel(), seed=9)
    calls = []
    original = getattr(codecs_sparse, index_work)

    def counted(*args, **kwargs):
        calls.append(index_work)
        return original(*args, **kwargs)

    monkeypatch.setattr(codecs_sparse, index_work, counted)
    packed, recon = codec.compress(x, seed=9)
    assert torch.equal(bits(recon), bits(expected))
    assert len(calls) == (0 if index_work == "ef_decode" else 1)
    codec.decompress(packed, x.numel(), seed=9)  # the control: a receiver does this work once
    assert len(calls) == (1 if index_work == "ef_decode" else 2)


# --- exact values on hand-made inputs --------------------------------------------------

def test_int8_exact_values_block_4() -> None:
    codec = parse_codec("int8:block=4")
    x = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0])
    packed, recon = codec.compress(x)
    # block 0: scale 2/127, q = rint(63.5, -127, 31.75, 0) = (64, -127, 32, 0) (half to even)
    assert packed["q"].tolist() == [64, -127, 32, 0, 127]
    np.testing.assert_array_equal(packed["s"], np.array([2 / 127, 3 / 127], np.float32))
    expected = np.array([64, -127, 32, 0, 127], np.float32) * np.repeat(packed["s"], [4, 1])
    assert torch.equal(recon, torch.from_numpy(expected))


def test_int8_all_zero_block_has_zero_scale() -> None:
    packed, recon = parse_codec("int8:block=2").compress(torch.tensor([0.0, 0.0, 1.0]))
    assert packed["s"].tolist() == [0.0, pytest.approx(1 / 127)] and packed["q"].tolist() == [0, 0, 127]
    assert recon[:2].tolist() == [0.0, 0.0]


def test_fp16_exact_values_and_clamp() -> None:
    x = torch.tensor([1.0, 65504.0, 1e6, -1e6, 1 / 3])
    packed, recon = parse_codec("fp16").compress(x)
    assert recon.tolist()[:4] == [1.0, 65504.0, 65504.0, -65504.0]
    assert recon[4].item() == float(np.float16(1 / 3))
    assert packed["v"].dtype == np.float16


def test_bf16_rounds_half_to_even() -> None:
    ulp = 2.0 ** -7
    x = torch.tensor([1.0, 1 + ulp / 2, 1 + 1.5 * ulp, -2.0])
    packed, recon = parse_codec("bf16").compress(x)
    assert packed["v"].tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC000]
    assert recon.tolist() == [1.0, 1.0, 1 + 2 * ulp, -2.0]


def test_topk_exact_selection_and_values() -> None:
    x = torch.tensor([0.1, -5.0, 0.0, 3.0, 0.2, -0.3, 4.0, 0.0])
    codec = parse_codec("topk:0.375")  # k = ceil(0.375 * 8) = 3
    packed, recon = codec.compress(x)
    assert recon.tolist() == [0.0, -5.0, 0.0, 3.0, 0.0, 0.0, 4.0, 0.0]
    assert packed["v"].tolist() == [-5.0, 3.0, 4.0]
    # Elias-Fano of (1, 3, 6) in [0, 8): 1 low bit; high parts (0, 1, 3) -> bits 0, 2, 5
    assert packed["ihi"].tolist() == [0b100101] and packed["ilo"].tolist() == [0b011]


def test_k_is_ceil_of_exact_fraction() -> None:
    assert parse_codec("topk:0.01").k(1_000_000) == 10_000  # 0.01 * 1e6 is 10000.000000000002 in floats
    assert parse_codec("topk:0.01").k(101) == 2
    assert parse_codec("topk:0.01").k(1) == 1
    assert parse_codec("topk:0.01").k(0) == 0


def test_splitmix64_matches_reference_vectors() -> None:
    # SplitMix64 from state 0 (Steele et al. 2014; Vigna's reference splitmix64.c)
    assert [int(v) for v in _splitmix64(0, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4,
                                                   0x06C45D188009454F]


def test_randk_indices_are_pinned() -> None:
    # Every peer must draw the same indices for a seed, on any numpy/torch version.
    assert randk_indices(10, 3, 0).tolist() == [1, 3, 9]
    assert randk_indices(1000, 10, 42).tolist() == [13, 191, 258, 364, 450, 562, 625, 708, 805, 974]


def test_randk_depends_on_seed_and_sends_no_indices() -> None:
    codec = parse_codec("randk:0.01+int8")
    x = heavy_tailed(10_000)
    p1, r1 = codec.compress(x, seed=1)
    _, r2 = codec.compress(x, seed=2)
    assert set(p1) == {"q", "s"}
    assert not torch.equal(r1.nonzero(), r2.nonzero())
    assert r1.count_nonzero() <= 100
    assert not torch.equal(codec.decompress(p1, 10_000, seed=2), r1)


# --- error bounds (as stated in the codec docstrings) ----------------------------------

def test_fp16_error_bound() -> None:
    x = heavy_tailed(100_000)
    _, recon = parse_codec("fp16").compress(x)
    err, mag = (x - recon).abs(), x.abs()
    normal = mag >= 2.0 ** -14
    assert (err[normal] <= mag[normal] * 2.0 ** -11).all()
    assert (err[~normal] <= 2.0 ** -25).all()


def test_bf16_error_bound() -> None:
    x = heavy_tailed(100_000)
    _, recon = parse_codec("bf16").compress(x)
    assert ((x - recon).abs() <= x.abs() * 2.0 ** -8).all()


@pytest.mark.parametrize("block", [1, 7, 256])
def test_int8_error_bound(block: int) -> None:
    x = heavy_tailed(10_001, seed=block)
    packed, recon = parse_codec(f"int8:block={block}").compress(x)
    half_scale = torch.from_numpy(packed["s"]).repeat_interleave(block)[:x.numel()] / 2
    assert ((x - recon).abs() <= half_scale * (1 + 1e-6) + 1e-30).all()


@pytest.mark.parametrize("spec", ["topk:0.01", "topk:0.05+int8", "topk:0.2+bf16"])
def test_topk_keeps_the_largest_and_zeroes_the_rest(spec: str) -> None:
    codec = parse_codec(spec)
    x = heavy_tailed(20_000, seed=9)
    _, recon = codec.compress(x)
    k = codec.k(x.numel())
    kept = recon != 0
    assert kept.sum().item() == k  # heavy-tailed values: no kept value rounds to 0
    assert x[kept].abs().min() >= x[~kept].abs().max()
    # error = dropped energy + value-codec error on kept entries
    dropped = x[~kept].square().sum()
    assert (x - recon).square().sum() >= dropped
    value_err = (x[kept] - recon[kept]).abs()
    assert (value_err <= x[kept].abs() * 2.0 ** -7 + x[kept].abs().max() / 254 * 1.001).all()


def test_identity_is_exact() -> None:
    x = heavy_tailed(1000)
    _, recon = parse_codec("fp32").compress(x)
    assert torch.equal(bits(recon), bits(x))


# --- sizes ------------------------------------------------------------------------------

def test_compression_ratios_at_one_million() -> None:
    n = 1_000_000
    x = heavy_tailed(n)
    ratios = {}
    for spec in ["identity", "fp16", "bf16", "int8", "topk:0.01", "topk:0.01+int8", "randk:0.01+int8"]:
        codec = parse_codec(spec)
        packed, _ = codec.compress(x, seed=1)
        actual = 4 * n / sum(a.nbytes for a in packed.values())
        assert actual == pytest.approx(codec.expected_ratio(n), rel=1e-12)
        ratios[spec] = actual
    assert ratios["identity"] == 1.0
    assert ratios["fp16"] == ratios["bf16"] == 2.0
    assert ratios["int8"] == 4 * n / (n + 4 * math.ceil(n / 256))
    assert ratios["topk:0.01+int8"] >= 100
    assert ratios["topk:0.01"] >= 100
    assert ratios["randk:0.01+int8"] >= 390


def test_elias_fano_size_is_two_plus_log_bits_per_index() -> None:
    n, k = 1_000_000, 10_000
    hi, lo = ef_nbytes(n, k)
    assert lo == k * 6 // 8  # floor(log2(100)) = 6 low bits
    assert hi == math.ceil((k + (n - 1) // 64 + 1) / 8)
    assert (hi + lo) * 8 / k < 8.6


def test_empty_tensor_round_trips() -> None:
    for spec in ALL_SPECS:
        codec = parse_codec(spec)
        packed, recon = codec.compress(torch.zeros(0))
        assert recon.shape == (0,) and codec.expected_ratio(0) == 1.0
        assert all(a.size == 0 for a in packed.values())


# --- refusing what a codec cannot have produced -----------------------------------------

def test_elias_fano_round_trip_and_refusals() -> None:
    rng = np.random.default_rng(0)
    for n, k in [(1, 1), (2, 2), (100, 1), (100, 100), (1 << 20, 333)]:
        idx = np.sort(rng.choice(n, size=k, replace=False)).astype(np.int64)
        hi, lo = ef_encode(idx, n)
        assert (hi.size, lo.size) == ef_nbytes(n, k)
        assert ef_decode(hi, lo, n, k).tolist() == idx.tolist()
    idx = np.array([1, 3, 6])
    hi, lo = ef_encode(idx, 8)
    with pytest.raises(CodecError, match="holds 2 indices"):
        ef_decode(np.array([0b000101], np.uint8), lo, 8, 3)
    with pytest.raises(CodecError, match="padding"):
        ef_decode(hi | np.uint8(0x80), lo, 8, 3)
    with pytest.raises(CodecError, match="padding"):
        ef_decode(hi, lo | np.uint8(0x08), 8, 3)
    with pytest.raises(CodecError, match="strictly increasing"):  # (1, 1, 6): a duplicate
        ef_decode(np.array([0b100011], np.uint8), lo, 8, 3)
    with pytest.raises(CodecError, match="strictly increasing"):  # 7 + ... >= n for n = 7
        ef_decode(*ef_encode(np.array([1, 3, 7]), 8), 7, 3)


@pytest.mark.parametrize("spec", ["fp16", "int8", "topk:0.01+int8", "randk:0.1"])
def test_decompress_refuses_wrong_layout(spec: str) -> None:
    codec = parse_codec(spec)
    packed, _ = codec.compress(heavy_tailed(1000))
    name = sorted(packed)[0]
    with pytest.raises(CodecError, match="expected"):
        codec.decompress({**packed, "junk": np.zeros(1, np.uint8)}, 1000)
    with pytest.raises(CodecError, match="expected"):
        codec.decompress({k: v for k, v in packed.items() if k != name}, 1000)
    with pytest.raises(CodecError, match="expected"):
        codec.decompress({**packed, name: packed[name][:-1]}, 1000)
    with pytest.raises(CodecError, match="expected"):
        codec.decompress({**packed, name: packed[name].astype(np.int16)}, 1000)
    with pytest.raises(CodecError, match="expected"):
        codec.decompress(packed, 1001)
    assert codec.decompress(packed, 1000).shape == (1000,)


def test_int8_refuses_bad_scales() -> None:
    codec = parse_codec("int8")
    packed, _ = codec.compress(heavy_tailed(300))
    for bad in (np.nan, np.inf, -1.0):
        s = packed["s"].copy()
        s[1] = bad
        with pytest.raises(CodecError, match="scales"):
            codec.decompress({"q": packed["q"], "s": s}, 300)


@pytest.mark.parametrize("x", [torch.zeros(3, dtype=torch.float64), torch.zeros(2, 2), [0.0]])
def test_compress_refuses_wrong_input(x) -> None:
    with pytest.raises((TypeError, ValueError)):
        parse_codec("int8").compress(x)


# --- spec grammar -----------------------------------------------------------------------

@pytest.mark.parametrize("spec,canonical", [
    ("identity", "identity"), ("fp32", "identity"), ("fp16", "fp16"), ("bf16", "bf16"),
    ("int8", "int8"), ("int8:block=256", "int8"), ("int8:block=128", "int8:block=128"),
    ("topk:0.01", "topk:0.01"), ("topk:0.0100", "topk:0.01"), ("topk:0.01+fp16", "topk:0.01"),
    ("topk:0.01+int8", "topk:0.01+int8"), ("topk:1.0+identity", "topk:1+fp32"),
    ("randk:0.01", "randk:0.01"), ("randk:0.01+int8:block=64", "randk:0.01+int8:block=64"),
])
def test_canonical_specs(spec: str, canonical: str) -> None:
    assert parse_codec(spec).spec == canonical
    assert parse_codec(canonical).spec == canonical


@pytest.mark.parametrize("spec,fragment", [
    ("", "1..64"), ("x" * 65, "1..64"), ("int9", "'int9'"), ("fp16:2", "'fp16:2'"),
    ("int8:block=0", "'block=0'"), ("int8:block=65537", "'block=65537'"), ("int8:blk=3", "'blk=3'"),
    ("topk", "fraction ''"), ("topk:0", "(0, 1]"), ("topk:1.5", "(0, 1]"), ("topk:1e-2", "'1e-2'"),
    ("topk:-0.1", "'-0.1'"), ("topk:0.01+topk:0.1", "'topk'"), ("fp16+int8", "'+int8'"),
    ("topk:0.01+int8+fp16", "too many"), ("topk:0.01+int4", "'int4'"), ("randk:nan", "'nan'"),
])
def test_bad_specs_name_the_bad_part(spec: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_codec(spec)
    assert fragment in str(info.value)
