"""Frames, messages and bundles: layout, round trips, encoder checks, sizes on the wire."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
import torch

from protocol import (FrameHeader, FrameKind, FrameRefused, Identity, Limits, RefusalReason,
                      TensorSpec, VerifyPolicy, codec_seed, decode_frame, encode_frame,
                      flat_model_spec, make_control_frame, make_snapshot_frame, make_update_frame,
                      model_fingerprint, model_spec_of, pack_bundle, parse_codec,
                      peek_frame_length, read_vector, unpack_bundle)
from protocol.frame import PREFIX_SIZE

A = Identity.generate(bytes(32))
SWARM, NOW = "s1", 50.0
FP = model_fingerprint({"w": ((3,), "float32")})
POLICY = VerifyPolicy(SWARM, FP)
CODECS = ["identity", "fp16", "bf16", "int8", "int8:block=32", "topk:0.01", "topk:0.01+int8",
          "topk:0.3+bf16", "randk:0.01", "randk:0.05+int8"]


def vec(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 1e-3


def header(**changes) -> FrameHeader:
    base = dict(swarm=SWARM, fingerprint=FP, sender=A.public_key, kind=FrameKind.UPDATE, seq=1,
                step=2, timestamp=NOW, codec="fp16", tensors=(TensorSpec("delta", (2,), "float32"),),
                extra={})
    return FrameHeader(**{**base, **changes})


def test_layout_of_the_fixed_prefix() -> None:
    frame = make_control_frame(A, kind=FrameKind.HELLO, swarm=SWARM, fingerprint=FP, seq=0,
                               step=0, timestamp=NOW, extra={"listen": "127.0.0.1:4000"})
    magic, version, sender, hlen, plen = struct.unpack_from(">4sH32sIQ", frame)
    assert (magic, version, sender) == (b"GTTS", 3, A.public_key)
    assert PREFIX_SIZE == 50 and len(frame) == 50 + hlen + plen + 64
    assert frame[50:50 + hlen] == (
        b'{"codec":"identity","extra":{"listen":"127.0.0.1:4000"},"fingerprint":"' + FP.encode()
        + b'","kind":"hello","seq":0,"step":0,"swarm":"s1","tensors":[],"ticket":0,"timestamp":50.0,'
        b'"to":"","to_epoch":0}')
    digest = hashlib.blake2b(frame[:-64], digest_size=32, person=b"gossip-tts/frame").digest()
    from protocol import verify_signature
    assert verify_signature(A.public_key, digest, frame[-64:])
    got = decode_frame(frame, POLICY, NOW)
    assert got.header.kind is FrameKind.HELLO and got.tensors == {}
    assert got.header.extra == {"listen": "127.0.0.1:4000"}


@pytest.mark.parametrize("spec", CODECS)
def test_update_receiver_sees_exactly_the_senders_reconstruction(spec: str) -> None:
    delta = vec(5000, seed=len(spec))
    frame, recon = make_update_frame(A, swarm=SWARM, fingerprint=FP, seq=11, step=3, timestamp=NOW,
                                     codec=parse_codec(spec), delta=delta)
    got = decode_frame(frame, VerifyPolicy(SWARM, FP, model_spec=flat_model_spec(5000)), NOW)
    assert got.header.codec == parse_codec(spec).spec
    assert torch.equal(read_vector(got).view(torch.int32), recon.dense().view(torch.int32))


def test_randk_seed_comes_from_sender_and_seq() -> None:
    delta = vec(10_000)
    _, r1 = make_update_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW,
                              codec="randk:0.01", delta=delta)
    _, r2 = make_update_frame(A, swarm=SWARM, fingerprint=FP, seq=2, step=0, timestamp=NOW,
                              codec="randk:0.01", delta=delta)
    assert not torch.equal(r1.dense(), r2.dense())
    assert codec_seed(A.public_key, 1, "delta") != codec_seed(A.public_key, 2, "delta")
    assert codec_seed(A.public_key, 1, "delta") == codec_seed(A.public_key, 1, "delta")


def test_snapshot_is_exact() -> None:
    x = vec(1000)
    frame = make_snapshot_frame(A, swarm=SWARM, fingerprint=FP, seq=4, step=9, timestamp=NOW,
                                vector=x, extra={"base_seq": 4})
    got = decode_frame(frame, POLICY, NOW)
    assert got.header.kind is FrameKind.SNAPSHOT and got.header.codec == "identity"
    assert torch.equal(read_vector(got).view(torch.int32), x.view(torch.int32))
    read_vector(got).add_(1.0)  # the decoded tensor is the receiver's to modify


def test_multi_tensor_frame_reshapes() -> None:
    codec = parse_codec("int8")
    a, b = vec(6), vec(4, seed=1)
    pa, ra = codec.compress(a)
    pb, rb = codec.compress(b)
    h = header(codec="int8", kind=FrameKind.SNAPSHOT,
               tensors=(TensorSpec("w.a", (2, 3), "float32"), TensorSpec("w.b", (4,), "float16")))
    packed = {**{f"w.a/{k}": v for k, v in pa.items()}, **{f"w.b/{k}": v for k, v in pb.items()}}
    got = decode_frame(encode_frame(A, h, packed), POLICY, NOW)
    assert torch.equal(got.tensors["w.a"], ra.reshape(2, 3)) and torch.equal(got.tensors["w.b"], rb)
    with pytest.raises(ValueError, match="one tensor"):
        read_vector(got)


def test_top1pct_int8_whole_frame_is_100x_smaller_than_fp32() -> None:
    n = 1_000_000
    delta = torch.distributions.StudentT(3.0).sample((n,)).float()
    frame, _ = make_update_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW,
                                 codec="topk:0.01+int8", delta=delta)
    assert 4 * n / len(frame) >= 100
    frame, _ = make_update_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW,
                                 codec="topk:0.01", delta=delta)
    assert 4 * n / len(frame) >= 100


@pytest.mark.parametrize("changes,fragment", [
    (dict(sender=bytes(32)), "sender"),
    (dict(codec="fp32"), "not canonical"),
    (dict(codec="nope"), "unknown codec"),
    (dict(swarm="has space"), "swarm"),
    (dict(seq=-1), "seq"),
    (dict(timestamp=float("inf")), "Out of range"),
    (dict(extra={"t": (1, 2)}), "read back equal"),
    (dict(extra={1: "x"}), "read back equal"),
    (dict(tensors=(TensorSpec("delta", (3,), "float32"),)), "expected"),
    (dict(tensors=()), "belongs to no tensor"),
])
def test_encoder_refuses_what_receivers_would_refuse(changes: dict, fragment: str) -> None:
    packed = {"delta/v": np.zeros(2, np.float16)}
    with pytest.raises(ValueError, match=fragment):
        encode_frame(A, header(**changes), packed)
    encode_frame(A, header(), packed)


def test_encoder_refuses_non_json_extra_and_size_limits() -> None:
    packed = {"delta/v": np.zeros(2, np.float16)}
    with pytest.raises(TypeError):
        encode_frame(A, header(extra={"k": b"\x00"}), packed)
    size = len(encode_frame(A, header(), packed))
    encode_frame(A, header(), packed, Limits(max_frame_bytes=size, max_header_bytes=1000))
    with pytest.raises(ValueError, match="frame is"):
        encode_frame(A, header(), packed, Limits(max_frame_bytes=size - 1, max_header_bytes=1000))
    with pytest.raises(ValueError, match="header is"):
        encode_frame(A, header(extra={"pad": "x" * 2000}), packed, Limits(max_header_bytes=1000))
    with pytest.raises(ValueError, match="expand"):
        encode_frame(A, header(), packed, Limits(max_decompressed_bytes=7))


def test_builders_refuse_non_finite_or_wrong_vectors() -> None:
    for bad in (torch.tensor([1.0, float("nan")]), torch.zeros(2, 2), torch.zeros(2, dtype=torch.float64)):
        with pytest.raises(ValueError):
            make_update_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW,
                              codec="fp16", delta=bad)
        with pytest.raises(ValueError):
            make_snapshot_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW, vector=bad)


def test_peek_frame_length() -> None:
    frame = make_snapshot_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW, vector=vec(10))
    assert peek_frame_length(frame[:PREFIX_SIZE], Limits()) == len(frame)
    assert peek_frame_length(frame[:PREFIX_SIZE], Limits(max_frame_bytes=len(frame), max_header_bytes=500)) == len(frame)
    cases = [(frame[:PREFIX_SIZE - 1], Limits(), RefusalReason.TRUNCATED),
             (b"XTTS" + frame[4:PREFIX_SIZE], Limits(), RefusalReason.BAD_MAGIC),
             (frame[:4] + b"\0\1" + frame[6:PREFIX_SIZE], Limits(), RefusalReason.BAD_VERSION),
             (frame[:4] + b"\0\2" + frame[6:PREFIX_SIZE], Limits(), RefusalReason.BAD_VERSION),
             (frame[:4] + b"\0\4" + frame[6:PREFIX_SIZE], Limits(), RefusalReason.BAD_VERSION),
             (frame[:PREFIX_SIZE], Limits(max_frame_bytes=len(frame) - 1, max_header_bytes=500), RefusalReason.TOO_LARGE),
             (frame[:PREFIX_SIZE], Limits(max_header_bytes=10), RefusalReason.TOO_LARGE)]
    for prefix, limits, reason in cases:
        with pytest.raises(FrameRefused) as info:
            peek_frame_length(prefix, limits)
        assert info.value.reason is reason


def test_bundle_round_trip_and_limits() -> None:
    frames = [b"a", b"", b"xyz" * 100]
    data = pack_bundle(frames)
    assert data[:8] == b"GTTB\0\0\0\3"
    assert unpack_bundle(data, Limits()) == frames
    assert unpack_bundle(pack_bundle([]), Limits()) == []
    assert unpack_bundle(data, Limits(max_bundle_frames=3)) == frames
    cases = [(data, Limits(max_bundle_frames=2), RefusalReason.TOO_LARGE),
             (data, Limits(max_frame_bytes=len(data) - 1, max_header_bytes=1), RefusalReason.TOO_LARGE),
             (b"GTTB\0\0\0\1" + struct.pack(">Q", 2 ** 40) + b"x", Limits(), RefusalReason.TOO_LARGE),
             (b"GTTB\0\0\0\1" + struct.pack(">Q", 2), Limits(), RefusalReason.TRUNCATED),
             (data[:-1], Limits(), RefusalReason.TRUNCATED),
             (data[:7], Limits(), RefusalReason.TRUNCATED),
             (data[:12], Limits(), RefusalReason.TRUNCATED),
             (data + b"\0", Limits(), RefusalReason.TRAILING_BYTES),
             (b"GTTX" + data[4:], Limits(), RefusalReason.BAD_MAGIC),
             (b"GTTB\xff\xff\xff\xff", Limits(), RefusalReason.TOO_LARGE)]
    for bad, limits, reason in cases:
        with pytest.raises(FrameRefused) as info:
            unpack_bundle(bad, limits)
        assert info.value.reason is reason
    exact = pack_bundle([b"x" * 300])
    assert unpack_bundle(exact, Limits(max_frame_bytes=len(exact), max_header_bytes=1)) == [b"x" * 300]


def test_model_fingerprint() -> None:
    spec = {"b": ((3,), "float32"), "a": ((2, 2), "float32")}
    fp = model_fingerprint(spec)
    assert len(fp) == 64 and fp == model_fingerprint(dict(reversed(list(spec.items()))))
    assert fp != model_fingerprint({**spec, "b": ((4,), "float32")})
    assert fp != model_fingerprint({**spec, "b": ((3,), "float16")})
    assert fp != model_fingerprint({"c": ((3,), "float32"), "a": ((2, 2), "float32")})
    state = {"a": torch.zeros(2, 2), "b": torch.zeros(3)}
    assert model_spec_of(state) == spec and model_fingerprint(model_spec_of(state)) == fp


@pytest.mark.parametrize("kwargs", [dict(max_frame_bytes=0), dict(max_tensors=-1), dict(max_header_bytes=True),
                                    dict(max_header_bytes=1 << 32), dict(max_bundle_frames=1.5)])
def test_limits_are_validated(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        Limits(**kwargs)


def test_default_limits_admit_a_billion_parameter_snapshot() -> None:
    limits = Limits()
    assert limits.max_decompressed_bytes >= 4 * 1_000_000_000 + 10_000
    assert limits.max_frame_bytes >= 4 * 1_000_000_000 + 10_000


@pytest.mark.parametrize("kwargs", [dict(swarm=""), dict(fingerprint=""), dict(max_clock_skew_s=-1.0),
                                    dict(max_clock_skew_s=float("nan")), dict(allowed_keys=frozenset({b"x"}))])
def test_policy_is_validated(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        VerifyPolicy(**{"swarm": SWARM, "fingerprint": FP, **kwargs})
