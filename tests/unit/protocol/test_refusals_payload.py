"""Refusals past the header: decompression, the payload container, shapes, dtypes, codecs
and finiteness; each with a frame that narrowly passes. Helpers live in
test_refusals.py."""

from __future__ import annotations

import struct

import lz4.frame
import numpy as np
import pytest
import safetensors.numpy
import torch

from protocol import (FrameHeader, FrameKind, FrameRefused, Limits, TensorSpec, VerifyPolicy,
                      decode_frame, encode_frame, flat_model_spec, make_snapshot_frame, parse_codec)
from protocol.codecs_sparse import ef_encode
from tests.unit.protocol.test_refusals import (A, FP, N, NOW, SWARM, R, accept, arrays_of, refuse,
                                               X, resign, split, st_raw, update, with_arrays,
                                               with_header)


def test_decompression_failed() -> None:
    frame = update()
    header, payload = split(frame)[1:3]
    assert refuse(resign(header, b"not lz4 at all")) is R.DECOMPRESSION_FAILED
    assert refuse(resign(header, b"")) is R.DECOMPRESSION_FAILED
    assert refuse(resign(header, payload[:-1])) is R.DECOMPRESSION_FAILED
    assert refuse(resign(header, payload + b"\0")) is R.DECOMPRESSION_FAILED
    assert refuse(resign(header, payload + payload)) is R.DECOMPRESSION_FAILED
    accept(resign(header, payload))


@pytest.mark.parametrize("store_size", [True, False])
def test_decompressed_too_large_payload(store_size: bool) -> None:
    frame = make_snapshot_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW, vector=X)
    raw = safetensors.numpy.save(arrays_of(frame))
    assert len(raw) > 4 * N  # so the limit below binds on the lz4 output, not the logical size
    frame = resign(split(frame)[1], lz4.frame.compress(raw, store_size=store_size))
    accept(frame, VerifyPolicy(SWARM, FP, limits=Limits(max_decompressed_bytes=len(raw))))
    tight = VerifyPolicy(SWARM, FP, limits=Limits(max_decompressed_bytes=len(raw) - 1))
    assert refuse(frame, tight) is R.DECOMPRESSED_TOO_LARGE


def test_lz4_claimed_size_is_checked_before_allocating() -> None:
    # lz4.frame.decompress would try to allocate the claimed 1 TiB; decode must just refuse.
    frame = update()
    payload = bytearray(split(frame)[2])
    assert payload[4] & 0x08  # content size present, bytes 6..13, header checksum at 14
    payload[6:14] = struct.pack("<Q", 2 ** 40)
    for checksum in range(256):
        payload[14] = checksum
        try:
            if lz4.frame.get_frame_info(bytes(payload))["content_size"] == 2 ** 40:
                break
        except RuntimeError:
            continue
    assert refuse(resign(split(frame)[1], bytes(payload))) is R.DECOMPRESSED_TOO_LARGE


def test_decompressed_too_large_logical_tensors() -> None:
    # 1% top-k of a 10^4 vector is a small payload that expands to 40 kB
    frame = update(codec="topk:0.01+int8", delta=torch.linspace(-1, 1, 10_000))
    accept(frame, VerifyPolicy(SWARM, FP, limits=Limits(max_decompressed_bytes=40_000)))
    tight = VerifyPolicy(SWARM, FP, limits=Limits(max_decompressed_bytes=39_999))
    assert refuse(frame, tight) is R.DECOMPRESSED_TOO_LARGE


def _bad_payloads(frame: bytes) -> dict[str, bytes | dict[str, np.ndarray]]:
    arrays = arrays_of(frame)  # int8: delta/q int8[N], delta/s float32[1]
    q, s = arrays["delta/q"], arrays["delta/s"]
    body = s.tobytes() + q.tobytes()

    def index(q_offsets=(4, 4 + N), q_shape=(N,), **s_entry) -> dict:
        return {"delta/s": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], **s_entry},
                "delta/q": {"dtype": "I8", "shape": list(q_shape), "data_offsets": list(q_offsets)}}

    return {
        "extra array": {**arrays, "delta/junk": np.zeros(1, np.uint8)},
        "orphan array": {**arrays, "other/q": np.zeros(1, np.uint8)},
        "no slash": {**arrays, "deltaq": np.zeros(1, np.uint8)},
        "missing array": {"delta/q": q},
        "short array": {"delta/q": q[:-1], "delta/s": s},
        "wrong dtype": {"delta/q": q.view(np.uint8), "delta/s": s},
        "nan scale": {"delta/q": q, "delta/s": np.array([np.nan], np.float32)},
        "negative scale": {"delta/q": q, "delta/s": -s},
        "gap": st_raw(index(q_offsets=(5, 5 + N)), body + b"\0"),
        "overlap": st_raw(index(q_offsets=(3, 3 + N)), body[:-1]),
        "trailing data": st_raw(index(), body + b"\0"),
        "offsets past end": st_raw(index(q_offsets=(4, 5 + N)), body),
        "shape/offsets disagree": st_raw(index(q_shape=(N + 1,)), body),
        "2-D array": st_raw(index(q_shape=(N, 1)), body),
        "F64 dtype": st_raw(index(q_offsets=(8, 8 + N), dtype="F64", data_offsets=[0, 8]),
                            s.astype(np.float64).tobytes() + q.tobytes()),
        "entry with extra key": st_raw(index(x=1), body),
        "index not JSON": struct.pack("<Q", 3) + b"{{{" + body,
        "index NaN": struct.pack("<Q", 3) + b"NaN" + body,
        "index list": struct.pack("<Q", 2) + b"[]" + body,
        "index too long": struct.pack("<Q", 10 ** 6) + b"{}",
        "shorter than 8": b"\0\0\0",
    }


@pytest.mark.parametrize("case", sorted(_bad_payloads(update())))
def test_bad_payload(case: str) -> None:
    frame = update()
    bad = _bad_payloads(frame)[case]
    if isinstance(bad, dict):
        bad_frame = with_arrays(frame, bad)
    else:
        bad_frame = resign(split(frame)[1], lz4.frame.compress(bad))
    assert refuse(bad_frame) is R.BAD_PAYLOAD
    accept(with_arrays(frame, arrays_of(frame)))


def test_shape_mismatch() -> None:
    frame = update()
    assert refuse(frame, VerifyPolicy(SWARM, FP, model_spec=flat_model_spec(N + 1))) is R.SHAPE_MISMATCH
    assert refuse(frame, VerifyPolicy(SWARM, FP, model_spec={"vector": ((N,), "float32")})) is R.SHAPE_MISMATCH
    assert refuse(frame, VerifyPolicy(SWARM, FP, model_spec={"delta": ((N, 1), "float32")})) is R.SHAPE_MISMATCH
    accept(frame, VerifyPolicy(SWARM, FP, model_spec=flat_model_spec(N)))


def test_dtype_mismatch() -> None:
    frame = update()
    assert refuse(frame, VerifyPolicy(SWARM, FP, model_spec={"delta": ((N,), "bfloat16")})) is R.DTYPE_MISMATCH
    accept(frame, VerifyPolicy(SWARM, FP, model_spec={"delta": ((N,), "float32")}))


@pytest.mark.parametrize("codec", ["int9", "topk:0.010+int8", "fp32", "topk:0.01+fp16", "int8:block=256", "int8:"])
def test_unknown_or_non_canonical_codec(codec: str) -> None:
    frame = update(codec="int8")
    assert refuse(with_header(frame, codec=codec)) is R.UNKNOWN_CODEC
    accept(with_header(frame, codec="int8"))


@pytest.mark.parametrize("value,ok", [(65504.0, True), (-65504.0, True), (np.inf, False),
                                      (-np.inf, False), (np.nan, False)])
def test_non_finite(value: float, ok: bool) -> None:
    header = FrameHeader(SWARM, FP, A.public_key, FrameKind.UPDATE, 1, 0, NOW, "fp16",
                         (TensorSpec("delta", (2,), "float32"),))
    frame = encode_frame(A, header, {"delta/v": np.array([0.5, value], np.float16)})
    if ok:
        assert accept(frame).tensors["delta"].tolist() == [0.5, value]
    else:
        assert refuse(frame) is R.NON_FINITE


def test_topk_update_carrying_more_than_k_entries_is_refused() -> None:
    """A top-k frame holds exactly k = ceil(F·N) entries: one more, however coded, is refused."""
    n, spec = 10_000, "topk:0.01+int8"
    codec = parse_codec(spec)
    k = codec.k(n)
    delta = torch.randn(n, generator=torch.Generator().manual_seed(3))
    frame = update(codec=spec, delta=delta)
    assert int(accept(frame).tensors["delta"].count_nonzero()) == k
    arrays = arrays_of(frame)
    bits = np.unpackbits(arrays["delta/ihi"], bitorder="little")
    free = np.flatnonzero(bits[:k + ((n - 1) >> 6) + 1] == 0)[0]  # 6 low bits at N/k = 100
    bits[free] = 1
    one_more_bit = {**arrays, "delta/ihi": np.packbits(bits, bitorder="little")}
    with pytest.raises(FrameRefused, match=f"holds {k + 1} indices, expected {k}") as info:
        decode_frame(with_arrays(frame, one_more_bit), VerifyPolicy(SWARM, FP), NOW)
    assert info.value.reason is R.BAD_PAYLOAD
    idx = np.sort(np.argsort(-np.abs(delta.numpy()), kind="stable")[:k + 1]).astype(np.int64)
    values = codec.values.compress(delta[idx])[0]
    hi, lo = ef_encode(idx, n)
    k_plus_one = {"delta/q": values["q"], "delta/s": values["s"], "delta/ihi": hi, "delta/ilo": lo}
    with pytest.raises(FrameRefused, match=f"expected int8 \\({k},\\)") as info:
        decode_frame(with_arrays(frame, k_plus_one), VerifyPolicy(SWARM, FP), NOW)
    assert info.value.reason is R.BAD_PAYLOAD
    accept(with_arrays(frame, arrays))
