"""Fuzzing decode_frame with mutated valid frames.

Outsiders (no key on the allow-list) flip, cut, extend, splice, edit headers, swap
signatures and re-sign with their own key: every such frame must be refused with
FrameRefused, unless the mutations cancelled out and the bytes equal an original.
Insiders (holding the allowed key) re-sign malformed headers, safetensors containers,
lz4 streams and packed arrays: the decoder must never raise anything but FrameRefused,
and what it accepts must be finite float32 tensors of the shapes its header declares.
"""

from __future__ import annotations

import collections
import json
import struct

import lz4.frame
import numpy as np
import pytest
import safetensors.numpy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import (FrameHeader, FrameKind, FrameRefused, Identity, Limits, TensorSpec,
                      VerifyPolicy, decode_frame, encode_frame, make_control_frame,
                      make_snapshot_frame, make_update_frame, model_fingerprint, parse_codec)
from protocol.frame import MAGIC, PREFIX_SIZE, VERSION, frame_digest
from protocol.header import canonical_json
from protocol.payload import lz4_decompress_bounded, unpack_payload

A = Identity.generate(b"\xaa" * 32)
B = Identity.generate(b"\xbb" * 32)
SWARM, NOW = "fuzz", 1000.0
FP = model_fingerprint({"w": ((8,), "float32")})
LIMITS = Limits(max_frame_bytes=1 << 20, max_header_bytes=4096, max_decompressed_bytes=1 << 20,
                max_tensors=8, max_bundle_frames=8)
POLICY = VerifyPolicy(SWARM, FP, allowed_keys=frozenset({A.public_key}), limits=LIMITS)
STATS: collections.Counter[str] = collections.Counter()


def _bases() -> list[bytes]:
    g = torch.Generator().manual_seed(0)
    common = dict(swarm=SWARM, fingerprint=FP, step=3, timestamp=NOW)
    out = []
    for seq, (codec, n) in enumerate([("identity", 16), ("fp16", 40), ("bf16", 9), ("int8:block=8", 50),
                                      ("topk:0.1+int8", 200), ("topk:0.05", 100), ("randk:0.2", 100),
                                      ("randk:0.1+int8", 64)]):
        out.append(make_update_frame(A, seq=seq, codec=codec, delta=torch.randn(n, generator=g),
                                     extra={"base_seq": seq}, **common)[0])
    out.append(make_snapshot_frame(A, seq=20, vector=torch.randn(16, generator=g), **common))
    out.append(make_control_frame(A, kind=FrameKind.HELLO, seq=21, extra={"listen": "10.0.0.1:1", "peers": []}, **common))
    out.append(make_control_frame(A, kind=FrameKind.ACK, seq=22, extra={"ack": 7}, **common))
    codec = parse_codec("int8:block=4")
    pa, _ = codec.compress(torch.randn(6, generator=g))
    pb, _ = codec.compress(torch.randn(3, generator=g))
    header = FrameHeader(SWARM, FP, A.public_key, FrameKind.SNAPSHOT, 23, 3, NOW, codec.spec,
                         (TensorSpec("a", (2, 3), "float32"), TensorSpec("b", (3,), "float16")))
    out.append(encode_frame(A, header, {**{f"a/{k}": v for k, v in pa.items()},
                                        **{f"b/{k}": v for k, v in pb.items()}}, LIMITS))
    return out


BASES = _bases()
BASE_SET = frozenset(BASES)


def split(frame: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    _, _, sender, hlen, _ = struct.unpack_from(">4sH32sIQ", frame, 0)
    return sender, frame[PREFIX_SIZE:PREFIX_SIZE + hlen], frame[PREFIX_SIZE + hlen:-64], frame[-64:]


def assemble(sender: bytes, header: bytes, payload: bytes, signer: Identity | None = None,
             signature: bytes = b"") -> bytes:
    body = struct.pack(">4sH32sIQ", MAGIC, VERSION, sender, len(header), len(payload)) + header + payload
    return body + (signer.sign(frame_digest(body)) if signer else signature)


# --- byte-level edits, shared by both attackers -----------------------------------------

POS = st.integers(0, 4096)
BYTE_OP = st.one_of(
    st.tuples(st.just("flip"), POS, st.integers(0, 7)),
    st.tuples(st.just("set"), POS, st.integers(0, 255)),
    st.tuples(st.just("truncate"), POS),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("insert"), POS, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), POS, st.integers(1, 64)),
    st.tuples(st.just("splice"), st.integers(0, len(BASES) - 1), POS, POS, st.integers(1, 128)),
)


def apply_byte_op(data: bytes, op: tuple) -> bytes:
    kind, n = op[0], len(data)
    if kind == "flip" and n:
        i = op[1] % n
        return data[:i] + bytes([data[i] ^ (1 << op[2])]) + data[i + 1:]
    if kind == "set" and n:
        i = op[1] % n
        return data[:i] + bytes([op[2]]) + data[i + 1:]
    if kind == "truncate":
        return data[:op[1] % (n + 1)]
    if kind == "extend":
        return data + op[1]
    if kind == "insert":
        i = op[1] % (n + 1)
        return data[:i] + op[2] + data[i:]
    if kind == "delete" and n:
        i = op[1] % n
        return data[:i] + data[i + op[2]:]
    if kind == "splice":
        src = BASES[op[1]]
        i, j = op[2] % len(src), op[3] % (n + 1)
        chunk = src[i:i + op[4]]
        return data[:j] + chunk + data[j + len(chunk):]
    return data


TEXT = st.text(alphabet="ab\u00e9\u4e2d\x00\"\\ /:-.0", max_size=12)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12)
HEADER_KEYS = ["codec", "extra", "fingerprint", "kind", "seq", "step", "swarm", "tensors", "timestamp", "to",
               "to_epoch", "ticket", "zz"]
TENSOR_LISTS = [[], [["delta", [16], "float32"]], [["delta", [200], "float32"]], [["delta", [0], "float32"]],
                [["delta", [10 ** 9], "float32"]], [["a", [2, 3], "float32"], ["b", [3], "float16"]],
                [["vector", [16], "float32"]], [["delta", [4, 4], "bfloat16"]], [["delta", [100], "float32"]]]
SPECS = ["identity", "fp16", "bf16", "int8", "int8:block=8", "int8:block=4", "topk:0.1+int8", "topk:0.05",
         "randk:0.2", "randk:0.1+int8", "topk:0.1", "fp32", "int9"]
FIELD_EDIT = st.one_of(
    st.tuples(st.sampled_from(HEADER_KEYS), st.one_of(st.just("<del>"), JSON_VALUE)),
    st.tuples(st.just("swarm"), st.sampled_from([SWARM, "fuzz2", "", "a b"])),
    st.tuples(st.just("fingerprint"), st.sampled_from([FP, FP[:-1] + "0", "x"])),
    st.tuples(st.just("timestamp"), st.floats(NOW - 400, NOW + 400)),
    st.tuples(st.sampled_from(["seq", "step", "to_epoch", "ticket"]), st.sampled_from([0, 1, 7, 2 ** 63 - 1, 2 ** 63, -1])),
    st.tuples(st.just("to"), st.sampled_from(["", "ab" * 32, "AB" * 32, "ab" * 31, 7])),
    st.tuples(st.just("kind"), st.sampled_from(["update", "snapshot", "hello", "ack", "Update"])),
    st.tuples(st.just("codec"), st.sampled_from(SPECS)),
    st.tuples(st.just("tensors"), st.sampled_from(TENSOR_LISTS)),
    st.tuples(st.just("extra"), st.dictionaries(TEXT, JSON_VALUE, max_size=3)),
)


def edit_header(header: bytes, edit: tuple) -> bytes:
    doc = json.loads(header)
    key, value = edit
    if value == "<del>":
        doc.pop(key, None)
    else:
        doc[key] = value
    return canonical_json(doc)


# --- outsiders ---------------------------------------------------------------------------

OUTSIDER_OP = st.one_of(
    BYTE_OP,
    st.tuples(st.just("header"), FIELD_EDIT),
    st.tuples(st.just("resign_as_a"), st.just(0)),
    st.tuples(st.just("resign_as_b"), st.just(0)),
    st.tuples(st.just("sender_b"), st.just(0)),
    st.tuples(st.just("swap_signature"), st.integers(0, len(BASES) - 1)),
    st.tuples(st.just("swap_payload"), st.integers(0, len(BASES) - 1)),
)


def apply_outsider_op(data: bytes, op: tuple) -> bytes:
    kind = op[0]
    if kind in ("flip", "set", "truncate", "extend", "insert", "delete", "splice"):
        return apply_byte_op(data, op)
    try:
        sender, header, payload, signature = split(data)
        if kind == "header":
            header = edit_header(header, op[1])
    except (struct.error, ValueError, TypeError, AttributeError, RecursionError):
        return data  # not parseable any more: leave it to the byte-level ops
    if kind == "header":
        return assemble(sender, header, payload, signature=signature)
    if kind == "resign_as_a":  # B signs, claims to be A
        return assemble(A.public_key, header, payload, signer=B)[:-64] + \
            B.sign(frame_digest(assemble(A.public_key, header, payload, signature=b"")))
    if kind == "resign_as_b":
        return assemble(B.public_key, header, payload, signer=B)
    if kind == "sender_b":
        return assemble(B.public_key, header, payload, signature=signature)
    if kind == "swap_signature":
        return data[:-64] + BASES[op[1]][-64:]
    if kind == "swap_payload":
        return assemble(sender, header, split(BASES[op[1]])[2], signature=signature)
    return data


def check_outsider(base: int, ops: list[tuple], policy: VerifyPolicy = POLICY) -> None:
    data = BASES[base]
    for op in ops:
        data = apply_outsider_op(data, op)
    STATS["outsider"] += 1
    try:
        decode_frame(data, policy, NOW)
    except FrameRefused as refused:
        STATS[f"outsider:{refused.reason.value}"] += 1
        return
    assert data in BASE_SET, "accepted a frame that no allowed key signed"
    STATS["outsider:accepted_original"] += 1


def outsider_runner(max_examples: int):
    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(base=st.integers(0, len(BASES) - 1), ops=st.lists(OUTSIDER_OP, min_size=1, max_size=4))
    def run(base: int, ops: list[tuple]) -> None:
        check_outsider(base, ops)
    return run


# --- insiders ----------------------------------------------------------------------------

ARRAY_OP = st.one_of(
    st.tuples(st.just("drop"), st.integers(0, 7)),
    st.tuples(st.just("add"), st.text(alphabet="ab/_.q", min_size=1, max_size=8)),
    st.tuples(st.just("resize"), st.integers(0, 7), st.integers(-3, 3)),
    st.tuples(st.just("dtype"), st.integers(0, 7),
              st.sampled_from(["float32", "float16", "int8", "uint8", "uint16", "uint32", "int32", "int64"])),
    st.tuples(st.just("fill"), st.integers(0, 7),
              st.sampled_from([0.0, -1.0, 1e30, 65504.0, np.inf, -np.inf, np.nan, 255, 2 ** 31])),
    st.tuples(st.just("rename"), st.integers(0, 7), st.text(alphabet="abdelt/qsvihno", min_size=1, max_size=8)),
)
INSIDER_OP = st.one_of(
    st.tuples(st.just("header_bytes"), st.lists(BYTE_OP, min_size=1, max_size=3)),
    st.tuples(st.just("header_field"), st.lists(FIELD_EDIT, min_size=1, max_size=3)),
    st.tuples(st.just("container_bytes"), st.lists(BYTE_OP, min_size=1, max_size=3)),
    st.tuples(st.just("lz4_bytes"), st.lists(BYTE_OP, min_size=1, max_size=3)),
    st.tuples(st.just("arrays"), st.lists(ARRAY_OP, min_size=1, max_size=3)),
)


def edit_arrays(arrays: dict[str, np.ndarray], op: tuple) -> dict[str, np.ndarray]:
    names = sorted(arrays)
    kind = op[0]
    if kind == "add":
        return {**arrays, op[1]: np.zeros(3, np.uint8)}
    if not names:
        return arrays
    name = names[op[1] % len(names)]
    arr = arrays[name]
    if kind == "drop":
        return {k: v for k, v in arrays.items() if k != name}
    if kind == "resize":
        size = max(0, arr.size + op[2])
        return {**arrays, name: np.resize(arr, size) if arr.size else np.zeros(size, arr.dtype)}
    if kind == "dtype":
        with np.errstate(all="ignore"):
            return {**arrays, name: arr.astype(op[2])}
    if kind == "fill" and arr.size:
        with np.errstate(all="ignore"):
            filled = arr.copy()
            filled[arr.size // 2] = np.array(op[2]).astype(arr.dtype)
        return {**arrays, name: filled}
    if kind == "rename":
        return {**{k: v for k, v in arrays.items() if k != name}, op[2]: arr}
    return arrays


def apply_insider_op(data: bytes, op: tuple) -> bytes:
    sender, header, payload, _ = split(data)
    kind = op[0]
    if kind == "header_bytes":
        for byte_op in op[1]:
            header = apply_byte_op(header, byte_op)
    elif kind == "header_field":
        for edit in op[1]:
            try:
                header = edit_header(header, edit)
            except (ValueError, TypeError, AttributeError, RecursionError):
                pass  # a previous edit left it unparseable
    elif kind == "container_bytes" or kind == "arrays":
        try:  # an earlier op may have broken the payload: then leave it as it is
            raw = lz4_decompress_bounded(payload, LIMITS.max_decompressed_bytes)
            arrays = None if kind == "container_bytes" else dict(unpack_payload(payload, LIMITS))
        except FrameRefused:
            return data
        if arrays is None:
            for byte_op in op[1]:
                raw = apply_byte_op(raw, byte_op)
        else:
            for array_op in op[1]:
                arrays = edit_arrays(arrays, array_op)
            raw = safetensors.numpy.save(arrays)
        payload = lz4.frame.compress(raw)
    elif kind == "lz4_bytes":
        for byte_op in op[1]:
            payload = apply_byte_op(payload, byte_op)
    return assemble(A.public_key, header, payload, signer=A)


def check_insider(base: int, ops: list[tuple]) -> None:
    data = BASES[base]
    for op in ops:
        data = apply_insider_op(data, op)
    STATS["insider"] += 1
    try:
        frame = decode_frame(data, POLICY, NOW)
    except FrameRefused as refused:
        STATS[f"insider:{refused.reason.value}"] += 1
        return
    STATS["insider:accepted"] += 1
    assert [t.name for t in frame.header.tensors] == list(frame.tensors)
    for spec in frame.header.tensors:
        tensor = frame.tensors[spec.name]
        assert tensor.dtype == torch.float32 and tuple(tensor.shape) == spec.shape
        assert bool(torch.isfinite(tensor).all())


def insider_runner(max_examples: int):
    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(base=st.integers(0, len(BASES) - 1), ops=st.lists(INSIDER_OP, min_size=1, max_size=2))
    def run(base: int, ops: list[tuple]) -> None:
        check_insider(base, ops)
    return run


# --- tests -------------------------------------------------------------------------------

def test_every_base_frame_is_valid() -> None:
    for frame in BASES:
        decode_frame(frame, POLICY, NOW)


def test_oracle_catches_an_accepted_forgery() -> None:
    # Without an allow-list, B's re-signed frame is accepted: the oracle must notice.
    open_policy = VerifyPolicy(SWARM, FP, limits=LIMITS)
    with pytest.raises(AssertionError, match="no allowed key signed"):
        check_outsider(0, [("resign_as_b", 0)], open_policy)
    with pytest.raises(FrameRefused):
        decode_frame(apply_outsider_op(BASES[0], ("resign_as_a", 0)), open_policy, NOW)


def test_fuzz_outsiders() -> None:
    STATS.clear()
    outsider_runner(2000)()
    assert STATS["outsider"] >= 2000
    seen = {k.split(":")[1] for k in STATS if k.startswith("outsider:")}
    assert seen >= {"bad_signature", "truncated", "trailing_bytes", "bad_magic", "bad_version",
                    "key_not_allowed", "too_large"}, seen


def test_fuzz_insiders() -> None:
    STATS.clear()
    insider_runner(2000)()
    assert STATS["insider"] >= 2000
    seen = {k.split(":")[1] for k in STATS if k.startswith("insider:")}
    assert seen >= {"accepted", "bad_header", "bad_payload", "decompression_failed", "unknown_codec",
                    "non_finite", "wrong_swarm", "wrong_fingerprint", "stale_timestamp"}, seen


# The slow variant: 100,000 cases in total, split so each test stays well inside the timeout.

@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fuzz_outsiders_50k() -> None:
    STATS.clear()
    outsider_runner(50_000)()
    assert STATS["outsider"] >= 50_000


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fuzz_insiders_50k() -> None:
    STATS.clear()
    insider_runner(50_000)()
    assert STATS["insider"] >= 50_000
