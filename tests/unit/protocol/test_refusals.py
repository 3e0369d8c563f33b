"""Every RefusalReason: one frame that triggers it and one that narrowly does not.

This file covers the envelope and the header; test_refusals_payload.py the payload.

Hostile frames are built by hand from their parts and re-signed, so each check is reached
on its own: a bug in an earlier check cannot hide a later one.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import lz4.frame
import numpy as np
import pytest
import safetensors.numpy
import torch

from protocol import (Frame, FrameHeader, FrameKind, FrameRefused, Identity, Limits,
                      RefusalReason, TensorSpec, VerifyPolicy, decode_frame,
                      make_snapshot_frame, make_update_frame,
                      model_fingerprint)
from protocol.frame import MAGIC, PREFIX_SIZE, VERSION, frame_digest
from protocol.header import canonical_json

R = RefusalReason
A = Identity.generate(bytes(32))
B = Identity.generate(b"\x01" * 32)
SWARM = "test-swarm"
N = 64
FP = model_fingerprint({"w": ((N,), "float32")})
NOW = 1000.0
POLICY = VerifyPolicy(SWARM, FP)
X = torch.linspace(-1.0, 1.0, N)


def update(seq: int = 1, *, timestamp: float = NOW, codec: str = "int8", identity: Identity = A,
           swarm: str = SWARM, fingerprint: str = FP, delta: torch.Tensor = X) -> bytes:
    return make_update_frame(identity, swarm=swarm, fingerprint=fingerprint, seq=seq, step=7,
                             timestamp=timestamp, codec=codec, delta=delta)[0]


def split(frame: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """(sender, header JSON, payload, signature)."""
    _, _, sender, hlen, _ = struct.unpack_from(">4sH32sIQ", frame, 0)
    return sender, frame[PREFIX_SIZE:PREFIX_SIZE + hlen], frame[PREFIX_SIZE + hlen:-64], frame[-64:]


def resign(header: bytes, payload: bytes, *, identity: Identity = A, sender: bytes | None = None,
           magic: bytes = MAGIC, version: int = VERSION) -> bytes:
    body = struct.pack(">4sH32sIQ", magic, version, sender or identity.public_key,
                       len(header), len(payload)) + header + payload
    return body + identity.sign(frame_digest(body))


def header_doc(frame: bytes) -> dict:
    return json.loads(split(frame)[1])


def with_header(frame: bytes, **changes) -> bytes:
    doc = {**header_doc(frame), **changes}
    return resign(canonical_json(doc), split(frame)[2])


def st_raw(index: dict, body: bytes) -> bytes:
    data = json.dumps(index).encode()
    return struct.pack("<Q", len(data)) + data + body


def with_arrays(frame: bytes, arrays: dict[str, np.ndarray]) -> bytes:
    return resign(split(frame)[1], lz4.frame.compress(safetensors.numpy.save(arrays)))


def arrays_of(frame: bytes) -> dict[str, np.ndarray]:
    return safetensors.numpy.load(lz4.frame.decompress(split(frame)[2]))


def accept(data: bytes, policy: VerifyPolicy = POLICY, now: float = NOW) -> Frame:
    return decode_frame(data, policy, now)


def refuse(data: bytes, policy: VerifyPolicy = POLICY, now: float = NOW) -> RefusalReason:
    with pytest.raises(FrameRefused) as info:
        decode_frame(data, policy, now)
    assert str(info.value).startswith(info.value.reason.value)
    return info.value.reason


def test_hand_builder_reproduces_encoder_bytes() -> None:
    frame = update()
    assert resign(split(frame)[1], split(frame)[2]) == frame  # Ed25519 is deterministic
    assert with_arrays(frame, arrays_of(frame)) == frame


def test_valid_frame_round_trips() -> None:
    frame, recon = make_update_frame(A, swarm=SWARM, fingerprint=FP, seq=3, step=9,
                                     timestamp=NOW, codec="int8", delta=X, extra={"base_seq": 2})
    got = accept(frame)
    assert got.header == FrameHeader(swarm=SWARM, fingerprint=FP, sender=A.public_key,
                                     kind=FrameKind.UPDATE, seq=3, step=9, timestamp=NOW,
                                     codec="int8", tensors=(TensorSpec("delta", (N,), "float32"),),
                                     extra={"base_seq": 2})
    assert got.raw_size == len(frame)
    assert torch.equal(got.tensors["delta"], recon.dense())


def test_bad_magic() -> None:
    frame = update()
    assert refuse(b"GTTX" + frame[4:]) is R.BAD_MAGIC
    assert refuse(b"\0" * 200) is R.BAD_MAGIC
    assert refuse(resign(*split(frame)[1:3], magic=b"GTTs")) is R.BAD_MAGIC
    accept(resign(*split(frame)[1:3], magic=b"GTTS"))


def test_bad_version() -> None:
    frame = update()
    for old in (0, 1, 2):  # 1: frames not bound to their receiver; 2: updates without their sender's steps
        assert refuse(resign(*split(frame)[1:3], version=old)) is R.BAD_VERSION
    assert refuse(resign(*split(frame)[1:3], version=4)) is R.BAD_VERSION
    with pytest.raises(FrameRefused, match="older than this peer's 3.*upgrade the sender"):
        accept(resign(*split(frame)[1:3], version=2))
    accept(resign(*split(frame)[1:3], version=3))


def test_too_large_frame_exactly_at_limit_is_accepted() -> None:
    frame = update()
    header_len = len(split(frame)[1])
    accept(frame, VerifyPolicy(SWARM, FP, limits=Limits(max_frame_bytes=len(frame), max_header_bytes=header_len)))
    tight = VerifyPolicy(SWARM, FP, limits=Limits(max_frame_bytes=len(frame) - 1, max_header_bytes=header_len))
    assert refuse(frame, tight) is R.TOO_LARGE


def test_too_large_header_exactly_at_limit_is_accepted() -> None:
    frame = update()
    header_len = len(split(frame)[1])
    accept(frame, VerifyPolicy(SWARM, FP, limits=Limits(max_header_bytes=header_len)))
    assert refuse(frame, VerifyPolicy(SWARM, FP, limits=Limits(max_header_bytes=header_len - 1))) is R.TOO_LARGE


def test_truncated_at_every_length() -> None:
    frame = update()
    assert {refuse(frame[:k]) for k in range(len(frame))} == {R.TRUNCATED}
    assert refuse(frame[:-1]) is R.TRUNCATED
    accept(frame)


def test_trailing_bytes() -> None:
    frame = update()
    assert refuse(frame + b"\0") is R.TRAILING_BYTES
    assert refuse(frame + frame) is R.TRAILING_BYTES
    accept(frame)


def test_bad_signature() -> None:
    frame = update()
    sender, header, payload, sig = split(frame)
    for i in range(0, 512, 7):  # bit flips across the whole signature
        flipped = bytearray(frame)
        flipped[len(frame) - 64 + i // 8] ^= 1 << (i % 8)
        assert refuse(bytes(flipped)) is R.BAD_SIGNATURE
    body = bytearray(frame)
    body[len(frame) - 70] ^= 1  # payload
    assert refuse(bytes(body)) is R.BAD_SIGNATURE
    assert refuse(frame[:-64] + bytes(64)) is R.BAD_SIGNATURE
    # B's signature over A's frame, and A's signature moved under B's name
    assert refuse(resign(header, payload, identity=B, sender=A.public_key)) is R.BAD_SIGNATURE
    assert refuse(frame[:6] + B.public_key + frame[38:]) is R.BAD_SIGNATURE
    accept(frame)


def test_signature_malleability_is_refused() -> None:
    # s + L (the group order) is the same point: libsodium refuses the non-canonical scalar.
    frame = update()
    order = 2 ** 252 + 27742317777372353535851937790883648493
    s = int.from_bytes(frame[-32:], "little") + order
    assert s < 2 ** 256
    assert refuse(frame[:-32] + s.to_bytes(32, "little")) is R.BAD_SIGNATURE


def test_signature_by_another_valid_key_is_a_different_sender() -> None:
    frame = update()
    forged = resign(*split(frame)[1:3], identity=B)
    assert accept(forged).header.sender == B.public_key  # no allow-list: it is B's own frame
    assert refuse(forged, VerifyPolicy(SWARM, FP, allowed_keys=frozenset({A.public_key}))) is R.KEY_NOT_ALLOWED


BAD_HEADERS = {
    "whitespace": lambda d: json.dumps(d, sort_keys=True).encode(),
    "unsorted": lambda d: json.dumps(dict(reversed(list(d.items()))), separators=(",", ":")).encode(),
    "missing key": lambda d: canonical_json({k: v for k, v in d.items() if k != "step"}),
    "unknown key": lambda d: canonical_json({**d, "zz": 1}),
    "negative seq": lambda d: canonical_json({**d, "seq": -1}),
    "bool seq": lambda d: canonical_json({**d, "seq": True}),
    "huge seq": lambda d: canonical_json({**d, "seq": 2 ** 63}),
    "float step": lambda d: canonical_json({**d, "step": 7.0}),
    "negative ticket": lambda d: canonical_json({**d, "ticket": -1}),
    "huge to_epoch": lambda d: canonical_json({**d, "to_epoch": 2 ** 63}),
    "to upper hex": lambda d: canonical_json({**d, "to": "AB" * 32}),
    "to short": lambda d: canonical_json({**d, "to": "ab" * 31}),
    "to not str": lambda d: canonical_json({**d, "to": 0}),
    "int timestamp": lambda d: canonical_json({**d, "timestamp": 1000}),
    "NaN timestamp": lambda d: canonical_json(d).replace(b'"timestamp":1000.0', b'"timestamp":NaN'),
    "Infinity timestamp": lambda d: canonical_json(d).replace(b'"timestamp":1000.0', b'"timestamp":Infinity'),
    "1e3 timestamp": lambda d: canonical_json(d).replace(b'"timestamp":1000.0', b'"timestamp":1e3'),
    "duplicate key": lambda d: canonical_json(d).replace(b'{"codec"', b'{"codec":"int8","codec"'),
    "unknown kind": lambda d: canonical_json({**d, "kind": "gossip"}),
    "bad swarm": lambda d: canonical_json({**d, "swarm": "two words"}),
    "empty codec": lambda d: canonical_json({**d, "codec": ""}),
    "extra not object": lambda d: canonical_json({**d, "extra": []}),
    "tensor dtype": lambda d: canonical_json({**d, "tensors": [["delta", [N], "int8"]]}),
    "tensor negative dim": lambda d: canonical_json({**d, "tensors": [["delta", [-1], "float32"]]}),
    "tensor name slash": lambda d: canonical_json({**d, "tensors": [["a/b", [N], "float32"]]}),
    "tensor duplicate": lambda d: canonical_json({**d, "tensors": [["delta", [N], "float32"]] * 2}),
    "tensor 9 dims": lambda d: canonical_json({**d, "tensors": [["delta", [1] * 9, "float32"]]}),
    "not an object": lambda d: b"[]",
    "not JSON": lambda d: b"{",
    "not ASCII": lambda d: canonical_json(d).replace(b'"extra":{}', b'"extra":{"\xc3\xa9":1}'),
    "empty": lambda d: b"",
    "deep nesting": lambda d: canonical_json(d).replace(b'"extra":{}', b'"extra":' + b"[" * 20000 + b"]" * 20000),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_bad_header(case: str) -> None:
    frame = update()
    doc = header_doc(frame)
    header = BAD_HEADERS[case](doc)
    assert header != canonical_json(doc)
    assert refuse(resign(header, split(frame)[2])) is R.BAD_HEADER
    accept(resign(canonical_json(doc), split(frame)[2]))


def test_tensor_count_limit_is_a_bad_header() -> None:
    frame = make_snapshot_frame(A, swarm=SWARM, fingerprint=FP, seq=1, step=0, timestamp=NOW,
                                vector=X)
    accept(frame, VerifyPolicy(SWARM, FP, limits=Limits(max_tensors=1)))
    doc = header_doc(frame)
    doc["tensors"] = [["vector", [N], "float32"], ["w2", [1], "float32"]]
    assert refuse(resign(canonical_json(doc), split(frame)[2]),
                  VerifyPolicy(SWARM, FP, limits=Limits(max_tensors=1))) is R.BAD_HEADER


def test_wrong_swarm() -> None:
    assert refuse(update(swarm="test-swarm2")) is R.WRONG_SWARM
    assert refuse(update(), VerifyPolicy("Test-swarm", FP)) is R.WRONG_SWARM
    accept(update(swarm="test-swarm"))


def test_wrong_fingerprint() -> None:
    other = model_fingerprint({"w": ((N + 1,), "float32")})
    assert refuse(update(fingerprint=other)) is R.WRONG_FINGERPRINT
    assert refuse(update(), VerifyPolicy(SWARM, FP.upper())) is R.WRONG_FINGERPRINT
    accept(update(fingerprint=FP))


def test_key_not_allowed() -> None:
    only_b = VerifyPolicy(SWARM, FP, allowed_keys=frozenset({B.public_key}))
    assert refuse(update(), only_b) is R.KEY_NOT_ALLOWED
    assert refuse(update(), VerifyPolicy(SWARM, FP, allowed_keys=frozenset())) is R.KEY_NOT_ALLOWED
    accept(update(), VerifyPolicy(SWARM, FP, allowed_keys=frozenset({A.public_key, B.public_key})))


@pytest.mark.parametrize("skew,ok", [(0.0, True), (299.0, True), (300.0, True), (-299.0, True),
                                     (-300.0, True), (301.0, False), (-301.0, False),
                                     (300.001, False), (1e9, False)])
def test_stale_timestamp(skew: float, ok: bool) -> None:
    frame = update(timestamp=NOW + skew)
    if ok:
        accept(frame)
    else:
        assert refuse(frame) is R.STALE_TIMESTAMP
    assert refuse(update(), now=float("nan")) is R.STALE_TIMESTAMP


def test_every_refusal_reason_has_a_test_here() -> None:
    source = "".join(p.read_text() for p in Path(__file__).parent.glob("test_refusals*.py"))
    covered = set(re.findall(r"is R\.([A-Z_]+)", source))
    assert covered == {reason.name for reason in RefusalReason}
    assert all(re.fullmatch(r"[a-z_]+", reason.value) for reason in RefusalReason)
