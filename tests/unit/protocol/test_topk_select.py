"""Top-k selection: the sampled-threshold path picks exactly the brute-force top-k set
(ties to the lowest indices, NaN largest), falls back on data that defeats its sample, and
what it picks is what receivers decode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from protocol import codecs_sparse, parse_codec
from protocol.codecs_sparse import _TOPK_SAMPLE, TOPK_SAMPLED_MIN, ef_decode, topk_candidates, topk_indices

CUT = TOPK_SAMPLED_MIN


def reference_topk(v: np.ndarray, k: int) -> np.ndarray:
    """Sort everything: NaN first, then by magnitude descending, then by index; keep k."""
    mags = np.abs(v.astype(np.float64))
    nan = np.isnan(mags)
    order = np.lexsort((np.arange(v.size), -np.where(nan, 0.0, mags), ~nan))
    return np.sort(order[:k]).astype(np.int64)


def check(v: np.ndarray, k: int, *, sampled: bool | None = None) -> None:
    """topk_indices(v, k) equals the reference; `sampled` says which path must have run."""
    got = topk_indices(v, k)
    assert got.dtype == np.int64 and got.shape == (k,)
    np.testing.assert_array_equal(got, reference_topk(v, k))
    if sampled is not None:
        assert (topk_candidates(v, k) is not None) == sampled


def gaussian(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


# --- random data: the sampled path runs and is exact --------------------------------------

@pytest.mark.parametrize("n", [CUT, CUT + 1, 3 * CUT + 7, 1_132_560])
@pytest.mark.parametrize("fraction", [0.1, 0.01, 0.001])
def test_sampled_path_equals_brute_force_on_random_vectors(n: int, fraction: float) -> None:
    v = gaussian(n, seed=n)
    check(v, max(1, int(fraction * n)), sampled=True)


@pytest.mark.parametrize("seed", range(4))
def test_sampled_path_on_heavy_tailed_and_signed_data(seed: int) -> None:
    rng = np.random.default_rng(seed)
    v = (rng.standard_t(2.5, 300_000) * np.exp(rng.standard_normal(300_000))).astype(np.float32)
    check(v, 30_000, sampled=True)
    check(-v, 3_000, sampled=True)


@pytest.mark.parametrize("n", [1, 2, 7, 1000, CUT - 1])
def test_short_vectors_select_directly_and_exactly(n: int) -> None:
    v = gaussian(n, seed=n)
    for k in sorted({1, max(1, n // 10), n}):
        check(v, k, sampled=False if k < n else None)


# --- ties, tiny k, k = n ------------------------------------------------------------------

@pytest.mark.parametrize("n", [CUT - 1, CUT, 200_003])
def test_heavy_ties_go_to_the_lowest_indices(n: int) -> None:
    rng = np.random.default_rng(n)
    levels = rng.integers(-3, 4, n).astype(np.float32)  # 7 values, 4 magnitudes: ties at every cut
    for k in (1, 17, n // 10, n // 3, n - 1):
        check(levels, k)
    assert topk_candidates(levels, n // 10) is not None or n < CUT


@pytest.mark.parametrize("n", [CUT - 1, CUT, 200_003])
@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -2.0])
def test_constant_and_all_zero_vectors_keep_the_first_k(n: int, value: float) -> None:
    v = np.full(n, value, np.float32)
    for k in (1, n // 100, n - 1, n):
        np.testing.assert_array_equal(topk_indices(v, k), np.arange(k))


def test_tiny_k_and_whole_vector() -> None:
    v = gaussian(500_000, seed=1)
    check(v, 1, sampled=True)
    check(v, 2, sampled=True)
    np.testing.assert_array_equal(topk_indices(v, v.size), np.arange(v.size))
    check(v, v.size - 1)
    assert topk_indices(v[:0], 0).shape == (0,)


def test_one_spike_off_the_sample_is_found() -> None:
    v = gaussian(1_000_000, seed=2) * 1e-3
    v[123_457] = 50.0  # not on the sample's stride
    assert topk_indices(v, 1).tolist() == [123_457]
    check(v, 1000, sampled=True)


# --- data that defeats the sample -----------------------------------------------------------

def test_skewed_data_forces_the_fallback_and_stays_exact() -> None:
    n = 1_132_560
    stride = n // _TOPK_SAMPLE
    v = gaussian(n, seed=4) * 1e-3
    v[::stride] = 10.0 + np.arange(v[::stride].size, dtype=np.float32)  # the sample sees only giants
    k = n // 10
    assert topk_candidates(v, k) is None  # too few pass the sampled threshold
    check(v, k)


def test_skewed_data_hiding_the_tail_between_samples_is_exact() -> None:
    n = 1_132_560
    stride = n // _TOPK_SAMPLE
    v = gaussian(n, seed=5) * 1e-3
    hidden = np.arange(n) % stride == stride // 2
    v[hidden] = np.random.default_rng(6).uniform(1, 2, hidden.sum()).astype(np.float32)
    check(v, n // 100)  # every chosen entry lies off the sample
    check(v, int(hidden.sum()) + 5)


# --- NaN and infinities (the publish path refuses them, but the codec is total) -------------

def test_nan_ranks_above_infinity_like_torch_topk() -> None:
    for n in (1000, 300_000):
        v = gaussian(n, seed=7)
        v[[5, n // 2, n - 1]] = np.nan
        v[[6, n // 3]] = [np.inf, -np.inf]
        check(v, 1)
        check(v, 3)
        check(v, 4)
        check(v, n // 10)
        torch_top = torch.topk(torch.from_numpy(np.abs(v)), 5).indices.numpy()
        assert set(topk_indices(v, 5)) == set(torch_top.tolist())


def test_more_nans_than_k_keeps_the_first_nans() -> None:
    v = np.full(200_000, np.nan, np.float32)
    v[::3] = 1.0
    check(v, 10)
    check(v, 150_000)


# --- the codec: what is picked is what receivers decode --------------------------------------

@pytest.mark.parametrize("spec", ["topk:0.1+int8", "topk:0.01", "topk:0.001+fp32"])
def test_codec_round_trip_decodes_the_reference_indices(spec: str) -> None:
    codec = parse_codec(spec)
    v = gaussian(1_132_560, seed=8)
    k = codec.k(v.size)
    packed, recon = codec.compress(torch.from_numpy(v), seed=3)
    ref = reference_topk(v, k)
    np.testing.assert_array_equal(ef_decode(packed["ihi"], packed["ilo"], v.size, k), ref)
    again = parse_codec(spec).decompress({name: a.copy() for name, a in packed.items()}, v.size, seed=3)
    assert torch.equal(recon, again)
    dropped = np.ones(v.size, bool)
    dropped[ref] = False
    assert not recon.numpy()[dropped].any()
    assert np.abs(recon.numpy()[ref] - v[ref]).max() <= np.abs(v).max() / 254 * 1.001


# --- the chunked candidate scan of long vectors ----------------------------------------------

@pytest.mark.parametrize("chunk", [4099, 1 << 15])
def test_chunked_scan_selects_exactly_across_chunk_boundaries(chunk: int, monkeypatch) -> None:
    monkeypatch.setattr(codecs_sparse, "_TOPK_ONE_PASS_MAX", 1000)  # every vector here is "long"
    monkeypatch.setattr(codecs_sparse, "_TOPK_CHUNK", chunk)
    n = 200_003
    v = gaussian(n, seed=11)
    v[[chunk - 1, chunk, 3 * chunk + 1]] = [np.nan, 40.0, -np.inf]  # on and beside the boundaries
    check(v, n // 10, sampled=True)
    check(v, 3, sampled=True)
    levels = np.random.default_rng(12).integers(-3, 4, n).astype(np.float32)
    check(levels, n // 10)
    passed = codecs_sparse.candidates_at_or_above(v, np.float32(1.5))
    assert len(passed) == -(-n // chunk)  # one piece per chunk scanned
    want = np.flatnonzero(~(np.abs(v) < 1.5))
    np.testing.assert_array_equal(np.concatenate([p.positions + p.start for p in passed]), want)
    np.testing.assert_array_equal(np.concatenate([p.magnitudes for p in passed]), np.abs(v)[want])
