"""Frames as peer/ uses them: one frame holds one update, one snapshot, or a control message.

An update carries `C(x - x̂)` of the flat parameter vector (CHOCO-SGD publish step); the
builder returns the reconstruction receivers will see, which the sender adds to its
public copy `x̂`. A snapshot carries `x̂` exactly, for new pairs and gaps the outbox cannot
fill. Several frames travel in one HTTP body as a bundle; the control frame that opens it
binds the rest with `bundle_digest`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence

import torch

from .codecs import CodecBase, TensorCodec, parse_codec
from .errors import FrameRefused, RefusalReason
from .finite import all_finite
from .frame import SIGNATURE_SIZE, Frame, codec_seed, encode_frame
from .header import FrameHeader, FrameKind, ParamSpec, TensorSpec, canonical_json
from .identity import Identity
from .limits import Limits
from .sparse import SparseVector

__all__ = ["make_update_frame", "make_step_update_frame", "make_snapshot_frame", "make_control_frame", "read_vector",
           "pack_bundle", "unpack_bundle", "bundle_spans", "BUNDLE_HEAD", "model_fingerprint", "model_spec_of",
           "flat_model_spec", "bundle_digest", "UPDATE_TENSOR", "STEP_TENSOR", "SNAPSHOT_TENSOR", "BUNDLE_MAGIC",
           "held_dtype"]

UPDATE_TENSOR = "delta"
STEP_TENSOR = "step"
"""An update or snapshot frame's optional second tensor (peer.core.partner_steps): in an update,
the sender's own training steps since its previous publish, without what it mixed in; in a
snapshot, those steps summed over every update it published in this run."""
SNAPSHOT_TENSOR = "vector"
HELD_DTYPE = "held"
"""Key of a snapshot header's `extra` naming the precision its vector is held in (`held_dtype`)."""
BUNDLE_MAGIC = b"GTTB"
_COUNT = struct.Struct(">4sI")
_LENGTH = struct.Struct(">Q")


_VECTOR_DTYPES = (torch.float32, torch.bfloat16)
"""What a frame's vector may be held in: the codecs read bfloat16 as its exact float32 widening
(`protocol.codec_input`), so a frame does not say which it was."""


def _check_vector(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dtype not in _VECTOR_DTYPES or x.dim() != 1:
        raise ValueError(f"{name} must be a 1-D float32 or bfloat16 tensor")
    if not all_finite(x):
        raise ValueError(f"{name} has non-finite values; receivers would refuse it")


def _vector_frame(identity: Identity, kind: FrameKind, vectors: dict[str, torch.Tensor], codec: CodecBase, *,
                  swarm: str, fingerprint: str, seq: int, step: int, timestamp: float, extra: dict | None,
                  limits: Limits | None) -> tuple[bytes, dict[str, SparseVector]]:
    """A frame of one or more same-sized 1-D vectors, each compressed with `codec` under its own
    seed; returns (frame bytes, each vector's reconstruction as receivers decode it)."""
    packed_all, recons, specs = {}, {}, []
    for name, x in vectors.items():
        _check_vector(name, x)
        x = x.detach()  # off the CPU, a sparse codec selects where x lives and moves only what it keeps
        packed, recons[name] = codec.compress_sparse(x, codec_seed(identity.public_key, seq, name))
        packed_all.update({f"{name}/{k}": v for k, v in packed.items()})
        specs.append(TensorSpec(name, (x.numel(),), "float32"))
    header = FrameHeader(swarm=swarm, fingerprint=fingerprint, sender=identity.public_key,
                         kind=kind, seq=seq, step=step, timestamp=float(timestamp),
                         codec=codec.spec, tensors=tuple(specs), extra=dict(extra or {}))
    return encode_frame(identity, header, packed_all, limits), recons


def make_update_frame(identity: Identity, *, swarm: str, fingerprint: str, seq: int, step: int,
                      timestamp: float, codec: TensorCodec | str, delta: torch.Tensor,
                      extra: dict | None = None,
                      limits: Limits | None = None) -> tuple[bytes, SparseVector]:
    """(frame bytes, the reconstruction every receiver will decode, bit for bit, as the entries the
    codec kept: `.added_to(x̂)` adds it, `.dense()` expands it).

    The codec seed comes from (sender, seq), so random-k sends no index bytes. `delta` may be
    float32 or bfloat16: a bfloat16 one gives the frame its float32 widening would, without
    widening it whole.
    """
    codec = parse_codec(codec) if isinstance(codec, str) else codec
    frame, recons = _vector_frame(identity, FrameKind.UPDATE, {UPDATE_TENSOR: delta}, codec, swarm=swarm,
                                  fingerprint=fingerprint, seq=seq, step=step, timestamp=timestamp,
                                  extra=extra, limits=limits)
    return frame, recons[UPDATE_TENSOR]


def make_step_update_frame(identity: Identity, *, swarm: str, fingerprint: str, seq: int, step: int,
                           timestamp: float, codec: TensorCodec | str, delta: torch.Tensor,
                           own_step: torch.Tensor, extra: dict | None = None,
                           limits: Limits | None = None) -> tuple[bytes, SparseVector, SparseVector]:
    """An update that also carries the sender's own training steps (`STEP_TENSOR`), both in one
    signed frame with the same codec: (frame bytes, the delta's reconstruction, the step's)."""
    codec = parse_codec(codec) if isinstance(codec, str) else codec
    frame, recons = _vector_frame(identity, FrameKind.UPDATE, {UPDATE_TENSOR: delta, STEP_TENSOR: own_step}, codec,
                                  swarm=swarm, fingerprint=fingerprint, seq=seq, step=step, timestamp=timestamp,
                                  extra=extra, limits=limits)
    return frame, recons[UPDATE_TENSOR], recons[STEP_TENSOR]


def make_snapshot_frame(identity: Identity, *, swarm: str, fingerprint: str, seq: int, step: int,
                        timestamp: float, vector: torch.Tensor, steps: torch.Tensor | None = None,
                        extra: dict | None = None, limits: Limits | None = None) -> bytes:
    """An exact snapshot of a flat vector (the public copy x̂), and of the sender's steps sum
    (`STEP_TENSOR`) where given. A bfloat16 vector is sent as bf16 (half the bytes; alone, as a
    steps sum beside it is float32) and named so in the signed header (`held_dtype`): receivers
    hold their copy in it, and so round each later update as the sender does."""
    vectors = {SNAPSHOT_TENSOR: vector} if steps is None else {SNAPSHOT_TENSOR: vector, STEP_TENSOR: steps}
    half = vector.dtype == torch.bfloat16
    codec = "bf16" if half and steps is None else "identity"
    extra = {**(extra or {}), HELD_DTYPE: "bfloat16"} if half else extra
    return _vector_frame(identity, FrameKind.SNAPSHOT, vectors, parse_codec(codec),
                         swarm=swarm, fingerprint=fingerprint, seq=seq, step=step,
                         timestamp=timestamp, extra=extra, limits=limits)[0]


def held_dtype(header: FrameHeader) -> torch.dtype:
    """The precision a snapshot's sender holds its copy in, and so its receivers theirs
    (`make_snapshot_frame`): bfloat16 where the signed header says so, else float32."""
    return torch.bfloat16 if header.extra.get(HELD_DTYPE) == "bfloat16" else torch.float32


def make_control_frame(identity: Identity, *, kind: FrameKind, swarm: str, fingerprint: str,
                       seq: int, step: int, timestamp: float, extra: dict | None = None,
                       limits: Limits | None = None, to: bytes = b"", to_epoch: int = 0,
                       ticket: int = 0) -> bytes:
    """A frame with no tensors (HELLO, ACK): signed metadata in `extra`, bound to the receiver
    `to` (its epoch and a ticket it issued) when given (`protocol.replay`)."""
    header = FrameHeader(swarm=swarm, fingerprint=fingerprint, sender=identity.public_key,
                         kind=FrameKind(kind), seq=seq, step=step, timestamp=float(timestamp),
                         codec="identity", tensors=(), extra=dict(extra or {}), to=to,
                         to_epoch=to_epoch, ticket=ticket)
    return encode_frame(identity, header, {}, limits)


def read_vector(frame: Frame) -> torch.Tensor:
    """The single 1-D logical tensor of a snapshot frame (or of an update without `STEP_TENSOR`)."""
    if len(frame.tensors) != 1:
        raise ValueError(f"expected one tensor, frame has {sorted(frame.tensors)}")
    (tensor,) = frame.tensors.values()
    if tensor.dim() != 1:
        raise ValueError(f"expected a 1-D tensor, got shape {tuple(tensor.shape)}")
    return tensor


def flat_model_spec(numel: int) -> ParamSpec:
    """`VerifyPolicy.model_spec` for update and snapshot frames of an N-parameter vector."""
    return {name: ((numel,), "float32") for name in (UPDATE_TENSOR, STEP_TENSOR, SNAPSHOT_TENSOR)}


def model_spec_of(tensors: Mapping[str, torch.Tensor]) -> ParamSpec:
    """name -> (shape, dtype) of a state dict, the input of `model_fingerprint`."""
    return {name: (tuple(t.shape), str(t.dtype).removeprefix("torch."))
            for name, t in tensors.items()}


def model_fingerprint(spec: Mapping[str, tuple[tuple[int, ...], str]]) -> str:
    """Hex BLAKE2b-256 of the sorted parameter names, shapes and dtypes.

    Peers with different architectures get different fingerprints and refuse each other.
    """
    doc = [[name, [int(d) for d in shape], str(dtype)]
           for name, (shape, dtype) in sorted(spec.items())]
    return hashlib.blake2b(canonical_json(doc), digest_size=32,
                           person=b"gossip-tts/model").hexdigest()


def bundle_digest(frames: Sequence[bytes]) -> str:
    """Hex BLAKE2b-128 of the frames' signatures, in order: what a control frame signs for the
    frames after it. A signature stands for its whole frame, so update frames signed once for
    every receiver are bound to one exchange without being signed again."""
    h = hashlib.blake2b(digest_size=16, person=b"gossip-tts/bndl")
    h.update(len(frames).to_bytes(8, "big"))
    for frame in frames:
        h.update(bytes(frame[-SIGNATURE_SIZE:]).rjust(SIGNATURE_SIZE, b"\0"))
    return h.hexdigest()


def pack_bundle(frames: list[bytes]) -> bytes:
    """Several frames in one body: magic "GTTB", u32 count, then u64 length + frame each."""
    parts = [_COUNT.pack(BUNDLE_MAGIC, len(frames))]
    for frame in frames:
        parts += [_LENGTH.pack(len(frame)), bytes(frame)]
    return b"".join(parts)


def unpack_bundle(data: bytes | memoryview, limits: Limits) -> list[bytes]:
    """Split a bundle into frames (still unverified); FrameRefused on any bad framing."""
    view = memoryview(data).cast("B")
    return [bytes(view[start:end]) for start, end in bundle_spans(view, limits)]


def bundle_spans(data: bytes | bytearray | memoryview, limits: Limits) -> list[tuple[int, int]]:
    """(start, end) of each frame of a bundle, nothing copied; FrameRefused on any bad framing."""
    view = memoryview(data).cast("B")
    if len(view) > limits.max_frame_bytes:
        raise FrameRefused(RefusalReason.TOO_LARGE, f"bundle {len(view)} bytes")
    if len(view) < _COUNT.size:
        raise FrameRefused(RefusalReason.TRUNCATED, "bundle shorter than its header")
    magic, count = _COUNT.unpack_from(view, 0)
    if magic != BUNDLE_MAGIC:
        raise FrameRefused(RefusalReason.BAD_MAGIC, f"bundle magic {magic!r}")
    if count > limits.max_bundle_frames:
        raise FrameRefused(RefusalReason.TOO_LARGE, f"{count} frames, limit {limits.max_bundle_frames}")
    spans, pos = [], _COUNT.size
    for i in range(count):
        if pos + _LENGTH.size > len(view):
            raise FrameRefused(RefusalReason.TRUNCATED, f"bundle ends before frame {i}")
        (length,) = _LENGTH.unpack_from(view, pos)
        pos += _LENGTH.size
        if length > limits.max_frame_bytes:
            raise FrameRefused(RefusalReason.TOO_LARGE, f"frame {i} is {length} bytes")
        if pos + length > len(view):
            raise FrameRefused(RefusalReason.TRUNCATED, f"bundle ends inside frame {i}")
        spans.append((pos, pos + length))
        pos += length
    if pos != len(view):
        raise FrameRefused(RefusalReason.TRAILING_BYTES, f"{len(view) - pos} bytes after the frames")
    return spans


BUNDLE_HEAD = _COUNT.size + _LENGTH.size
"""Where a bundle's first frame starts: a receiver can read its sender from the first bytes."""
