"""Signed frames: the unit every peer sends and receives.

Layout (big-endian integers):

    magic "GTTS" | version u16 | sender public key (32 B) | header_len u32 | payload_len u64
    | canonical JSON header | payload = lz4(safetensors(packed arrays)) | Ed25519 signature

The signature (64 B) covers the BLAKE2b-256 digest (personalised "gossip-tts/frame") of
every byte before it, so a frame can be hashed while it streams in. The fixed-size prefix
names the sender and every length, so `decode_frame` checks sizes against `Limits` and the
signature before it parses any JSON or decompresses any byte (docs/wire.md).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass

import numpy as np
import torch

from .codecs import parse_codec
from .codecs_dense import CodecBase, check_layout
from .errors import CodecError, FrameRefused, RefusalReason
from .header import FrameHeader, HeaderError, header_from_json, header_to_json
from .identity import Identity, verify_signature
from .limits import Limits, VerifyPolicy
from .payload import pack_payload, unpack_payload
from .sparse import SparseVector

__all__ = ["Frame", "VerifiedFrame", "encode_frame", "decode_frame", "verify_frame", "peek_frame_length", "peek_frame_sender", "codec_seed",
           "frame_digest", "MAGIC", "VERSION", "PREFIX_SIZE", "SIGNATURE_SIZE"]

MAGIC = b"GTTS"
VERSION = 3
"""2: headers name their receiver, its epoch and a ticket it issued (`protocol.replay`); 3: an update
frame may also carry its sender's own training steps (`messages.STEP_TENSOR`)."""
_PREFIX = struct.Struct(">4sH32sIQ")
PREFIX_SIZE = _PREFIX.size  # 50
SIGNATURE_SIZE = 64
_DIGEST_PERSON = b"gossip-tts/frame"
_SEED_PERSON = b"gossip-tts/seed"


@dataclass
class Frame:
    """A verified frame: its header, its logical tensors as the entries their codec kept (float32,
    flat), its size on the wire. `tensors` expands them, shaped as the header says."""

    header: FrameHeader
    parts: dict[str, SparseVector]
    raw_size: int

    @functools.cached_property
    def tensors(self) -> dict[str, torch.Tensor]:
        """Each tensor whole (built on first use: an update added sparsely never needs it)."""
        return {t.name: self.parts[t.name].dense().reshape(t.shape) for t in self.header.tensors}


def frame_digest(*parts: bytes | memoryview) -> bytes:
    """BLAKE2b-256 of the frame bytes before the signature; this is what gets signed."""
    h = hashlib.blake2b(digest_size=32, person=_DIGEST_PERSON)
    for part in parts:
        h.update(part)
    return h.digest()


def codec_seed(sender: bytes, seq: int, name: str) -> int:
    """The shared codec seed of one tensor of one frame: random-k needs no index bytes."""
    h = hashlib.blake2b(digest_size=8, person=_SEED_PERSON)
    h.update(bytes(sender) + int(seq).to_bytes(8, "big") + name.encode("utf-8"))
    return int.from_bytes(h.digest(), "big")


def _split_packed(packed: dict[str, np.ndarray], names: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Packed arrays are named "<tensor>/<array>"; group them by logical tensor."""
    groups: dict[str, dict[str, np.ndarray]] = {name: {} for name in names}
    for key, arr in packed.items():
        tensor, slash, sub = key.partition("/")
        if not slash or tensor not in groups:
            raise CodecError(f"packed array {key!r} belongs to no tensor of the header")
        groups[tensor][sub] = arr
    return groups


def encode_frame(identity: Identity, header: FrameHeader, packed: dict[str, np.ndarray],
                 limits: Limits | None = None) -> bytes:
    """Sign and serialise a frame; ValueError for any frame a receiver with `limits` refuses.

    `packed` holds each logical tensor's codec output under "<tensor name>/<array name>".
    """
    limits = limits or Limits()
    if header.sender != identity.public_key:
        raise ValueError("header.sender must be the signing identity's public key")
    header_bytes = header_to_json(header, limits.max_tensors)
    if len(header_bytes) > limits.max_header_bytes:
        raise ValueError(f"header is {len(header_bytes)} bytes, limit {limits.max_header_bytes}")
    codec = parse_codec(header.codec)
    if codec.spec != header.codec:
        raise ValueError(f"codec spec {header.codec!r} is not canonical; use {codec.spec!r}")
    groups = _split_packed(packed, [t.name for t in header.tensors])
    logical_bytes = 0
    for spec in header.tensors:
        check_layout(groups[spec.name], codec.layout(spec.numel))
        logical_bytes += 4 * spec.numel
    if logical_bytes > limits.max_decompressed_bytes:
        raise ValueError(f"tensors expand to {logical_bytes} bytes, limit "
                         f"{limits.max_decompressed_bytes}")
    payload = pack_payload(packed)
    size = PREFIX_SIZE + len(header_bytes) + len(payload) + SIGNATURE_SIZE
    if size > limits.max_frame_bytes:
        raise ValueError(f"frame is {size} bytes, limit {limits.max_frame_bytes}")
    prefix = _PREFIX.pack(MAGIC, VERSION, identity.public_key, len(header_bytes), len(payload))
    signature = identity.sign(frame_digest(prefix, header_bytes, payload))
    return b"".join((prefix, header_bytes, payload, signature))


def _version_detail(version: int) -> str:
    if version < VERSION:
        return (f"wire version {version} is older than this peer's {VERSION}, whose exchanges are bound "
                "to their receiver against replays; upgrade the sender")
    return f"wire version {version} is newer than this peer's {VERSION}; upgrade this peer"


def peek_frame_length(prefix: bytes | memoryview, limits: Limits) -> int:
    """Total length of the frame whose first `PREFIX_SIZE` bytes are given.

    Lets a streaming reader refuse an oversized frame before reading it.
    """
    _, header_len, payload_len = _read_prefix(prefix)
    if header_len > limits.max_header_bytes:
        raise FrameRefused(RefusalReason.TOO_LARGE,
                           f"header {header_len} bytes, limit {limits.max_header_bytes}")
    total = PREFIX_SIZE + header_len + payload_len + SIGNATURE_SIZE
    if total > limits.max_frame_bytes:
        raise FrameRefused(RefusalReason.TOO_LARGE,
                           f"frame {total} bytes, limit {limits.max_frame_bytes}")
    return total


def peek_frame_sender(data: bytes | memoryview) -> bytes:
    """The sender key a frame's fixed prefix names, unverified: lets a receiver refuse a frame
    signed by another key than it expects before hashing or decoding any of it."""
    return _read_prefix(data)[0]


def _read_prefix(data: bytes | memoryview) -> tuple[bytes, int, int]:
    """(sender, header length, payload length) of a frame's fixed prefix, magic and version checked."""
    if len(data) < PREFIX_SIZE:
        raise FrameRefused(RefusalReason.TRUNCATED, f"prefix shorter than {PREFIX_SIZE} bytes")
    magic, version, sender, header_len, payload_len = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise FrameRefused(RefusalReason.BAD_MAGIC, f"magic {magic!r}")
    if version != VERSION:
        raise FrameRefused(RefusalReason.BAD_VERSION, _version_detail(version))
    return sender, header_len, payload_len


def _check_envelope(view: memoryview, policy: VerifyPolicy) -> tuple[bytes, int]:
    """Sizes, magic, version, allow-list, signature: everything before parsing. -> (sender, header_len)."""
    limits, size = policy.limits, len(view)
    if size > limits.max_frame_bytes:
        raise FrameRefused(RefusalReason.TOO_LARGE, f"frame {size} bytes, limit {limits.max_frame_bytes}")
    if size < 6:
        raise FrameRefused(RefusalReason.TRUNCATED, f"only {size} bytes")
    if view[:4] != MAGIC:
        raise FrameRefused(RefusalReason.BAD_MAGIC, f"magic {bytes(view[:4])!r}")
    (version,) = struct.unpack_from(">H", view, 4)
    if version != VERSION:
        raise FrameRefused(RefusalReason.BAD_VERSION, _version_detail(version))
    if size < PREFIX_SIZE + SIGNATURE_SIZE:
        raise FrameRefused(RefusalReason.TRUNCATED, f"only {size} bytes")
    _, _, sender, header_len, payload_len = _PREFIX.unpack_from(view, 0)
    if header_len > limits.max_header_bytes:
        raise FrameRefused(RefusalReason.TOO_LARGE,
                           f"header {header_len} bytes, limit {limits.max_header_bytes}")
    expected = PREFIX_SIZE + header_len + payload_len + SIGNATURE_SIZE
    if size < expected:
        raise FrameRefused(RefusalReason.TRUNCATED, f"{size} bytes, prefix declares {expected}")
    if size > expected:
        raise FrameRefused(RefusalReason.TRAILING_BYTES, f"{size} bytes, prefix declares {expected}")
    # Checked before the signature so an unlisted key cannot make us hash its payload;
    # either order refuses the same frames.
    if policy.allowed_keys is not None and sender not in policy.allowed_keys:
        raise FrameRefused(RefusalReason.KEY_NOT_ALLOWED, f"sender {sender.hex()[:16]}...")
    digest = frame_digest(view[:size - SIGNATURE_SIZE])
    if not verify_signature(sender, digest, bytes(view[size - SIGNATURE_SIZE:])):
        raise FrameRefused(RefusalReason.BAD_SIGNATURE, f"sender {sender.hex()[:16]}...")
    return sender, header_len


def _check_header(header: FrameHeader, policy: VerifyPolicy, now: float) -> CodecBase:
    if header.swarm != policy.swarm:
        raise FrameRefused(RefusalReason.WRONG_SWARM, f"swarm {header.swarm!r}")
    if header.fingerprint != policy.fingerprint:
        raise FrameRefused(RefusalReason.WRONG_FINGERPRINT, f"fingerprint {header.fingerprint!r}")
    skew = header.timestamp - now
    if not abs(skew) <= policy.max_clock_skew_s:
        raise FrameRefused(RefusalReason.STALE_TIMESTAMP, f"clock skew {skew:.3f} s")
    try:
        codec = parse_codec(header.codec)
    except ValueError as exc:
        raise FrameRefused(RefusalReason.UNKNOWN_CODEC, str(exc)) from None
    if codec.spec != header.codec:
        raise FrameRefused(RefusalReason.UNKNOWN_CODEC, f"{header.codec!r} is not canonical")
    spec = policy.model_spec
    for t in header.tensors:
        if spec is not None:
            if t.name not in spec or spec[t.name][0] != t.shape:
                raise FrameRefused(RefusalReason.SHAPE_MISMATCH, f"tensor {t.name!r} {t.shape}")
            if spec[t.name][1] != t.dtype:
                raise FrameRefused(RefusalReason.DTYPE_MISMATCH, f"tensor {t.name!r} {t.dtype}")
    logical_bytes = 4 * sum(t.numel for t in header.tensors)
    if logical_bytes > policy.limits.max_decompressed_bytes:
        raise FrameRefused(RefusalReason.DECOMPRESSED_TOO_LARGE,
                           f"tensors expand to {logical_bytes} bytes")
    return codec


def decode_frame(data: bytes | bytearray | memoryview, policy: VerifyPolicy, now: float) -> Frame:
    """Verify and decode a frame; FrameRefused(reason, detail) for anything not acceptable.

    Order: sizes, magic/version, allow-list, signature; header (schema, swarm, fingerprint,
    timestamp skew, codec, shapes/dtypes, expanded size); lz4 with an output limit; payload
    container; codec; finiteness. Whether a frame is fresh *for this receiver* is the
    receiver's ticket book's call (`protocol.replay.TicketBook`), made after this.
    """
    return verify_frame(data, policy, now).decode()


def verify_frame(data: bytes | bytearray | memoryview, policy: VerifyPolicy, now: float) -> "VerifiedFrame":
    """`decode_frame`'s checks up to the header, none of the payload: a receiver that learns from
    the signed header that a frame cannot change what it holds drops it before the costly part."""
    view = memoryview(data).cast("B")
    sender, header_len = _check_envelope(view, policy)
    try:
        header = header_from_json(bytes(view[PREFIX_SIZE:PREFIX_SIZE + header_len]), sender,
                                  policy.limits.max_tensors)
    except HeaderError as exc:
        raise FrameRefused(RefusalReason.BAD_HEADER, str(exc)) from None
    return VerifiedFrame(header, _check_header(header, policy, now), view, header_len, policy.limits)


@dataclass(frozen=True)
class VerifiedFrame:
    """A frame whose signature and header passed (`verify_frame`), its payload not yet read."""

    header: FrameHeader
    codec: CodecBase
    view: memoryview
    header_len: int
    limits: Limits

    def decode(self) -> Frame:
        """lz4 with an output limit, payload container, codec, finiteness (FrameRefused for any)."""
        view, header = self.view, self.header
        arrays = unpack_payload(view[PREFIX_SIZE + self.header_len:len(view) - SIGNATURE_SIZE], self.limits)
        parts: dict[str, SparseVector] = {}
        try:
            groups = _split_packed(arrays, [t.name for t in header.tensors])
            for t in header.tensors:
                seed = codec_seed(header.sender, header.seq, t.name)
                parts[t.name] = self.codec.decompress_sparse(groups[t.name], t.numel, seed)
        except CodecError as exc:
            raise FrameRefused(RefusalReason.BAD_PAYLOAD, str(exc)) from None
        for name, part in parts.items():
            if not part.all_finite():
                raise FrameRefused(RefusalReason.NON_FINITE, f"tensor {name!r}")
        return Frame(header=header, parts=parts, raw_size=len(view))
