"""Top-k selection, exact against an approximate sampled threshold, in one run.

    python benchmarks/codec.py --selection [--selection-sizes 1132560,30000000] [--repeats 5]

For each size, one heavy-tailed vector (`codec.synthetic_delta`) goes through the top-k
encode a publish runs (select, gather, value codec, index code, reconstruction) with:

- `exact, re-decoding`: the shipped selection, the reconstruction decoded back from the
  index code just written (the control for keeping the indices);
- `exact`: the shipped `SparseCodec.compress`;
- `approximate`: keep every |x_i| at or above the strided sample's own estimate of the
  (1 - k/N) quantile, cut to the first k in index order when more pass (so never more than
  the k a receiver allows, and sometimes fewer); the wire would then have to carry the count;
- `torch.topk` (selection only): exact selection without the sampled narrowing.

It prints per-publish milliseconds (best of --repeats, the methods taking turns, one torch
thread), the kept fraction m/N, the kept energy sum x_i^2 over the kept entries as a share of
the exact top-k's, the relative error of the kept part (the value codec's, ||x_S - x̂_S|| /
||x_S|| over the kept set S) and of the whole vector, ||x - x̂|| / ||x||.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import torch

from protocol import SparseCodec, parse_codec
from protocol.codecs_sparse import _TOPK_CHUNK, _TOPK_SAMPLE, ef_encode, topk_indices

Selector = Callable[[np.ndarray, int], np.ndarray]


def approximate_topk(v: np.ndarray, k: int) -> np.ndarray:
    """Sorted indices of |v_i| >= the sample's estimate of the k-th largest, at most k of them."""
    sample = np.abs(v[::max(1, v.size // _TOPK_SAMPLE)])
    rank = min(sample.size, max(1, round(k * sample.size / v.size)))
    threshold = np.partition(sample, sample.size - rank)[sample.size - rank]
    found, count = [], 0
    for start in range(0, v.size, _TOPK_CHUNK):  # chunk by chunk, as the exact selection's passes
        at = np.flatnonzero(~(np.abs(v[start:start + _TOPK_CHUNK]) < threshold)) + start
        found.append(at[:k - count])
        count += found[-1].size
        if count == k:
            break
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def encode_with(select: Selector, codec: SparseCodec, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kept indices, reconstruction): the work of a top-k publish with `select` choosing."""
    idx = select(v, codec.k(v.size))
    packed = codec.values._pack(np.ascontiguousarray(v[idx]), 0)
    ef_encode(idx, v.size)
    out = np.zeros(v.size, np.float32)
    out[idx] = codec.values._unpack(packed, idx.size, 0)
    return idx, out


def best_ms(timed: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best milliseconds of each callable, run in turn `repeats` times (a shared machine's
    load then falls on every method alike)."""
    best = dict.fromkeys(timed, math.inf)
    for _ in range(repeats):
        for name, fn in timed.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: seconds * 1e3 for name, seconds in best.items()}


def compare(delta: torch.Tensor, spec: str, repeats: int) -> list[dict]:
    """One row per method for this vector; see the module docstring."""
    codec = parse_codec(spec)
    v = delta.numpy()
    n, k = v.size, codec.k(v.size)
    norm2 = float(np.dot(v, v))
    exact_idx = topk_indices(v, k)
    exact_energy = float(np.dot(v[exact_idx], v[exact_idx]))

    def row(method: str, select_ms: float, encode_ms: float | None, idx: np.ndarray | None,
            recon: np.ndarray | None) -> dict:
        out = {"params": n, "method": method, "select_ms": select_ms, "encode_ms": encode_ms}
        if idx is not None and recon is not None:
            kept = v[idx]
            out["kept_fraction"] = idx.size / n
            out["kept_energy_vs_exact"] = float(np.dot(kept, kept)) / exact_energy
            out["kept_rel_error"] = float(np.linalg.norm(kept - recon[idx]) / np.linalg.norm(kept))
            out["rel_error"] = math.sqrt(float(np.sum((v - recon) ** 2)) / norm2)
        return out

    def redecoding() -> torch.Tensor:
        return codec.decompress(codec._pack(v, 0), n)

    mags = torch.from_numpy(v).abs()
    ms = best_ms({"select exact": lambda: topk_indices(v, k),
                  "select approximate": lambda: approximate_topk(v, k),
                  "select torch.topk": lambda: torch.topk(mags, k, sorted=False),
                  "exact, re-decoding": redecoding,
                  "exact": lambda: codec.compress(delta),
                  "approximate": lambda: encode_with(approximate_topk, codec, v)}, repeats)
    approx_idx, approx_recon = encode_with(approximate_topk, codec, v)
    return [row("exact, re-decoding", ms["select exact"], ms["exact, re-decoding"], exact_idx,
                redecoding().numpy()),
            row("exact", ms["select exact"], ms["exact"], exact_idx, codec.compress(delta)[1].numpy()),
            row("approximate", ms["select approximate"], ms["approximate"], approx_idx, approx_recon),
            row("torch.topk", ms["select torch.topk"], None, None, None)]


def print_rows(rows: list[dict]) -> None:
    print(f"{'params':>10} {'method':<20} {'select ms':>10} {'encode ms':>10} {'kept frac':>10} "
          f"{'kept energy':>12} {'kept err':>9} {'rel err':>8}")
    for r in rows:
        encode = "–" if r["encode_ms"] is None else f"{r['encode_ms']:.2f}"
        kept = (f"{r['kept_fraction']:>10.5f} {r['kept_energy_vs_exact']:>12.5f} {r['kept_rel_error']:>9.4f} "
                f"{r['rel_error']:>8.4f}" if "kept_fraction" in r else "")
        print(f"{r['params']:>10,} {r['method']:<20} {r['select_ms']:>10.2f} {encode:>10} {kept}")
