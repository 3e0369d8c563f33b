"""The frame header: its types, and its one canonical JSON encoding.

Canonical JSON (sorted keys, no whitespace, ASCII only, no NaN/Infinity, no duplicate
keys) gives each header exactly one byte string, so a decoder can refuse any other
spelling; the signature then covers the meaning, not just some bytes. The sender's key is
not in the JSON: it sits in the frame's fixed binary prefix, where the signature check
can read it without parsing anything.

`to`, `to_epoch` and `ticket` bind a frame to one receiver process (`protocol.replay`):
empty/0 in frames meant for anyone (hellos, states, update frames signed once for every
neighbour), set in the control frame that opens each half of an exchange.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["FrameKind", "TensorSpec", "FrameHeader", "canonical_json", "header_to_json",
           "header_from_json", "HeaderError", "LOGICAL_DTYPES", "ParamSpec"]

LOGICAL_DTYPES = frozenset({"float32", "float16", "bfloat16"})
ParamSpec = dict[str, tuple[tuple[int, ...], str]]
"""A model's parameters by name: (shape, dtype name). Its hash is the model fingerprint every frame
names (`protocol.messages.model_fingerprint`); a trainer states its own (`Trainer.param_spec`)."""
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")
_TENSOR_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}")
_KEY_HEX = re.compile(r"[0-9a-f]{64}")
_KEYS = frozenset({"codec", "extra", "fingerprint", "kind", "seq", "step", "swarm",
                   "tensors", "timestamp", "to", "to_epoch", "ticket"})
_MAX_INT = (1 << 63) - 1
_MAX_DIMS = 8


class HeaderError(ValueError):
    """A header that is not well-formed (decode_frame reports BAD_HEADER)."""


class FrameKind(str, Enum):
    """What a frame carries. HELLO and ACK carry no tensors."""

    UPDATE = "update"
    SNAPSHOT = "snapshot"
    HELLO = "hello"
    ACK = "ack"


_KINDS = frozenset(kind.value for kind in FrameKind)


@dataclass(frozen=True)
class TensorSpec:
    """A logical tensor of the frame (what the receiver gets), not a packed array."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class FrameHeader:
    """Everything about a frame except its payload and signature."""

    swarm: str
    fingerprint: str
    sender: bytes
    kind: FrameKind
    seq: int
    step: int
    timestamp: float
    codec: str
    tensors: tuple[TensorSpec, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    to: bytes = b""
    """The receiver's public key, or b"" for a frame meant for anyone."""
    to_epoch: int = 0
    """The receiver's epoch this frame was made for (0: none)."""
    ticket: int = 0
    """The receiver-issued ticket this frame spends (0: none)."""


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, ASCII, finite numbers only."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def _is_int(value: Any) -> bool:
    return type(value) is int and 0 <= value <= _MAX_INT


def _check_fields(doc: dict[str, Any], max_tensors: int) -> tuple[TensorSpec, ...]:
    if set(doc) != _KEYS:
        raise HeaderError(f"header keys {sorted(doc)} != {sorted(_KEYS)}")
    for key in ("swarm", "fingerprint"):
        if not isinstance(doc[key], str) or _TOKEN.fullmatch(doc[key]) is None:
            raise HeaderError(f"{key} must match {_TOKEN.pattern}")
    if not isinstance(doc["kind"], str) or doc["kind"] not in _KINDS:
        raise HeaderError(f"unknown kind {doc['kind']!r}")
    if not isinstance(doc["to"], str) or doc["to"] and _KEY_HEX.fullmatch(doc["to"]) is None:
        raise HeaderError("to must be \"\" or a public key in 64 lowercase hex digits")
    for key in ("seq", "step", "to_epoch", "ticket"):
        if not _is_int(doc[key]):
            raise HeaderError(f"{key} must be an int in [0, 2**63)")
    if type(doc["timestamp"]) is not float or not math.isfinite(doc["timestamp"]):
        raise HeaderError("timestamp must be a finite float")
    if not isinstance(doc["codec"], str) or not 0 < len(doc["codec"]) <= 64:
        raise HeaderError("codec must be a str of 1..64 characters")
    if not isinstance(doc["extra"], dict):
        raise HeaderError("extra must be an object")
    tensors = doc["tensors"]
    if not isinstance(tensors, list) or len(tensors) > max_tensors:
        raise HeaderError(f"tensors must be a list of at most {max_tensors}")
    specs = []
    for item in tensors:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and _TENSOR_NAME.fullmatch(item[0]) and isinstance(item[1], list)
                and len(item[1]) <= _MAX_DIMS and all(_is_int(d) for d in item[1])
                and isinstance(item[2], str) and item[2] in LOGICAL_DTYPES):
            raise HeaderError(f"bad tensor entry {str(item)[:80]}")
        specs.append(TensorSpec(item[0], tuple(item[1]), item[2]))
    if len({s.name for s in specs}) != len(specs):
        raise HeaderError("duplicate tensor names")
    return tuple(specs)


def header_to_json(header: FrameHeader, max_tensors: int = 1 << 30) -> bytes:
    """The canonical header bytes; ValueError/TypeError if the header is not encodable."""
    doc = {
        "swarm": header.swarm, "fingerprint": header.fingerprint,
        "kind": FrameKind(header.kind).value, "seq": header.seq, "step": header.step,
        "timestamp": float(header.timestamp), "codec": header.codec,
        "tensors": [[t.name, [int(d) for d in t.shape], t.dtype] for t in header.tensors],
        "extra": header.extra, "to": bytes(header.to).hex(), "to_epoch": header.to_epoch,
        "ticket": header.ticket,
    }
    data = canonical_json(doc)
    if header_from_json(data, header.sender, max_tensors).extra != header.extra:
        raise ValueError("extra must hold only JSON values that read back equal "
                         "(str keys, lists not tuples, no bytes)")
    return data


def _reject_constant(name: str) -> None:
    raise HeaderError(f"non-finite constant {name}")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise HeaderError("duplicate key")
    return out


def header_from_json(data: bytes, sender: bytes, max_tensors: int) -> FrameHeader:
    """Parse and validate canonical header bytes; HeaderError on anything else."""
    try:
        doc = json.loads(data.decode("ascii"), object_pairs_hook=_unique_pairs,
                         parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:  # includes UnicodeDecodeError, HeaderError
        raise HeaderError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise HeaderError("header is not an object")
    specs = _check_fields(doc, max_tensors)
    try:
        canonical = canonical_json(doc)
    except (ValueError, RecursionError) as exc:
        raise HeaderError(f"not re-encodable: {exc}") from None
    if canonical != data:
        raise HeaderError("header JSON is not in canonical form")
    return FrameHeader(swarm=doc["swarm"], fingerprint=doc["fingerprint"], sender=sender,
                       kind=FrameKind(doc["kind"]), seq=doc["seq"], step=doc["step"],
                       timestamp=doc["timestamp"], codec=doc["codec"], tensors=specs,
                       extra=doc["extra"], to=bytes.fromhex(doc["to"]), to_epoch=doc["to_epoch"],
                       ticket=doc["ticket"])
