"""Why a frame was refused.

Every refusal carries one `RefusalReason`; its value is a short snake_case string so a
peer can count refusals per reason as a Prometheus label without mapping tables.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["RefusalReason", "FrameRefused", "CodecError"]


class RefusalReason(str, Enum):
    """The first check a frame failed: `decode_frame`'s checks in the order it applies them,
    then the receiver binding of an exchange (`protocol.replay.TicketBook`)."""

    BAD_MAGIC = "bad_magic"
    BAD_VERSION = "bad_version"
    TOO_LARGE = "too_large"
    TRUNCATED = "truncated"
    TRAILING_BYTES = "trailing_bytes"
    BAD_SIGNATURE = "bad_signature"
    BAD_HEADER = "bad_header"
    WRONG_SWARM = "wrong_swarm"
    WRONG_FINGERPRINT = "wrong_fingerprint"
    KEY_NOT_ALLOWED = "key_not_allowed"
    STALE_TIMESTAMP = "stale_timestamp"
    DECOMPRESSION_FAILED = "decompression_failed"
    DECOMPRESSED_TOO_LARGE = "decompressed_too_large"
    BAD_PAYLOAD = "bad_payload"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    UNKNOWN_CODEC = "unknown_codec"
    NON_FINITE = "non_finite"
    WRONG_RECEIVER = "wrong_receiver"
    NO_TICKET = "no_ticket"
    STALE_EPOCH = "stale_epoch"
    STALE_TICKET = "stale_ticket"
    UNBOUND_FRAME = "unbound_frame"


class FrameRefused(Exception):
    """Raised for any frame (or bundle) that must not be used.

    `detail` is for logs: it may quote header values, never secrets.
    """

    def __init__(self, reason: RefusalReason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail


class CodecError(ValueError):
    """Packed arrays that a codec cannot have produced (wrong keys, dtypes or lengths).

    `decode_frame` turns it into `FrameRefused(BAD_PAYLOAD)`.
    """
