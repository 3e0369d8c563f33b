"""Top-k as torch ops where the tensor lives (`protocol.topk_device`) picks exactly the indices of the
numpy selection, and a sparse codec that selects there writes exactly the same packed arrays: a GPU
peer's frames are a CPU peer's. Run here on the CPU device, the ops are the ones a GPU runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import protocol.topk_device as topk_device
from protocol.codecs import parse_codec
from protocol.codec_input import DEVICE_PIECE
from protocol.codecs_sparse import TOPK_SAMPLED_MIN, topk_indices
from protocol.topk_device import device_topk_indices, magnitude_keys


def _vectors(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    gauss = rng.standard_normal(n).astype(np.float32)
    special = gauss.copy()
    special[rng.random(n) < 0.6] = 0.0
    for value, share in ((np.nan, 0.01), (np.inf, 0.01), (-np.inf, 0.01), (-0.0, 0.05), (1e-40, 0.02)):
        special[rng.random(n) < share] = value
    special[rng.random(n) < 0.01] = -np.float32(np.nan)  # a NaN with its sign bit set
    return {
        "gaussian": gauss,
        "heavy-tailed": (rng.standard_cauchy(n) * 1e-3).astype(np.float32),
        "tied": np.round(gauss * 2).astype(np.float32),
        "special": special,
    }


@pytest.mark.parametrize("n", [1, 7, 1000, TOPK_SAMPLED_MIN + 3, 200_003])
@pytest.mark.parametrize("share", [0.001, 0.01, 0.1, 0.5, 0.999])
def test_the_indices_are_the_numpy_selections(n, share):
    k = max(1, round(n * share))
    for name, v in _vectors(n, seed=n).items():
        want = topk_indices(torch.from_numpy(v), k)
        for chunk in (1 << 12, DEVICE_PIECE):
            got = device_topk_indices(torch.from_numpy(v), k, chunk=chunk)
            assert got.dtype == torch.int64
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name}, k={k}, chunk={chunk}")


def test_bfloat16_selects_as_its_float32_widening():
    v = torch.from_numpy(_vectors(100_000, seed=3)["special"]).to(torch.bfloat16)
    for k in (1, 1000, 50_000):
        want = topk_indices(v, k)
        np.testing.assert_array_equal(device_topk_indices(v, k, chunk=1 << 13).numpy(), want)


def test_the_ends_of_k():
    v = torch.randn(5000)
    assert device_topk_indices(v, 0).numel() == 0
    np.testing.assert_array_equal(device_topk_indices(v, 5000).numpy(), np.arange(5000))
    np.testing.assert_array_equal(device_topk_indices(v, 4999).numpy(), topk_indices(v, 4999))
    with pytest.raises(ValueError, match="top-k of 5001 entries from 5000"):
        device_topk_indices(v, 5001)
    with pytest.raises(ValueError, match="1-D float32 or bfloat16"):
        device_topk_indices(v.double(), 3)


def test_a_threshold_on_a_tie_falls_back_to_bisection_and_holds_only_k(monkeypatch):
    """All magnitudes equal: the sampled threshold passes every entry, far past k, so the search
    bisects the keys instead and keeps the first k, chunk by chunk."""
    bisected = []
    real = topk_device._kth_by_bisection
    monkeypatch.setattr(topk_device, "_kth_by_bisection", lambda *a: bisected.append(real(*a)) or bisected[-1])
    v = torch.full((300_000,), -0.5)
    v[::7] = 0.5  # the same magnitude, other sign
    got = device_topk_indices(v, 1000, chunk=1 << 14)
    assert bisected == [int(magnitude_keys(torch.tensor([0.5]))[0])]
    np.testing.assert_array_equal(got.numpy(), np.arange(1000))


def test_nan_keys_are_one_value_above_infinity():
    keys = magnitude_keys(torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0]))
    assert keys[0] == keys[1] > keys[2] == keys[3] > keys[6] > keys[4] == keys[5] == 0


@pytest.mark.parametrize("spec", ["topk:0.01+int8", "topk:0.1", "topk:0.25+fp32", "randk:0.05+int8", "randk:0.1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_selecting_where_the_tensor_lives_packs_the_same_bits(spec, dtype):
    codec = parse_codec(spec)
    x = (torch.randn(150_001, generator=torch.Generator().manual_seed(9)) * 0.01).to(dtype)
    packed, rebuilt = codec.compress_sparse(x, seed=77)
    packed_held, rebuilt_held = codec.compress_where_held(x, seed=77)
    assert packed.keys() == packed_held.keys()
    for name in packed:
        np.testing.assert_array_equal(packed_held[name], packed[name], err_msg=name)
    assert torch.equal(rebuilt_held.indices, rebuilt.indices)
    assert torch.equal(rebuilt_held.values, rebuilt.values)
