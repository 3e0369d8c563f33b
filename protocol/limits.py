"""Size limits and the receiver's verification policy.

Every size read from the wire is compared with a `Limits` field before anything is
allocated, so a peer's memory use per frame is bounded by its own configuration, not by
what a sender claims.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .header import ParamSpec

__all__ = ["Limits", "VerifyPolicy", "DEFAULT_MAX_PARAMS"]

#: The defaults admit an exact fp32 snapshot of a model this large (the 800M preset with room).
DEFAULT_MAX_PARAMS = 1_100_000_000
_OVERHEAD = 1 << 20  # header, safetensors index, lz4 block headers, signature


@dataclass(frozen=True)
class Limits:
    """Bounds applied to every frame before the bytes they describe are touched.

    A peer may hold a tighter instance for `POST /v1/exchange` (updates only) than for
    `GET /v1/state` (full snapshots).
    """

    max_frame_bytes: int = 4 * DEFAULT_MAX_PARAMS + _OVERHEAD
    """Whole frame on the wire, and also the whole body of a bundle."""
    max_header_bytes: int = 64 * 1024
    """Canonical JSON header; also bounds the safetensors index inside the payload."""
    max_decompressed_bytes: int = 4 * DEFAULT_MAX_PARAMS + _OVERHEAD
    """lz4 output, and the fp32 size of the logical tensors a frame may expand to."""
    max_tensors: int = 4096
    """Logical tensors per frame; packed arrays are bounded by `ARRAYS_PER_TENSOR` times this."""
    max_bundle_frames: int = 4096
    """Frames in one bundle (`pack_bundle`)."""

    ARRAYS_PER_TENSOR = 4  # the most packed arrays any codec emits per logical tensor

    def __post_init__(self) -> None:
        for name in ("max_frame_bytes", "max_header_bytes", "max_decompressed_bytes",
                     "max_tensors", "max_bundle_frames"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")
        if self.max_header_bytes >= 1 << 32:
            raise ValueError("Limits.max_header_bytes must fit in 32 bits")

    @property
    def max_packed_arrays(self) -> int:
        return self.max_tensors * self.ARRAYS_PER_TENSOR


@dataclass(frozen=True)
class VerifyPolicy:
    """What a receiver accepts: its swarm, its model, optionally an allow-list of keys.

    `model_spec` maps logical tensor name -> (shape, dtype); when set, every tensor a frame
    names must appear in it with that shape and dtype (see `messages.flat_model_spec` for
    the flat update/snapshot frames).
    """

    swarm: str
    fingerprint: str
    allowed_keys: frozenset[bytes] | None = None
    max_clock_skew_s: float = 300.0
    limits: Limits = field(default_factory=Limits)
    model_spec: ParamSpec | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.swarm, str) or not self.swarm:
            raise ValueError("VerifyPolicy.swarm must be a non-empty str")
        if not isinstance(self.fingerprint, str) or not self.fingerprint:
            raise ValueError("VerifyPolicy.fingerprint must be a non-empty str")
        if self.allowed_keys is not None:
            keys = frozenset(self.allowed_keys)
            if any(not isinstance(k, bytes) or len(k) != 32 for k in keys):
                raise ValueError("VerifyPolicy.allowed_keys must hold 32-byte public keys")
            object.__setattr__(self, "allowed_keys", keys)
        if not (self.max_clock_skew_s >= 0.0):  # also refuses NaN
            raise ValueError("VerifyPolicy.max_clock_skew_s must be >= 0")
        if not isinstance(self.limits, Limits):
            raise TypeError("VerifyPolicy.limits must be a Limits")
        if self.model_spec is not None:
            spec = {str(n): (tuple(int(d) for d in s), str(t)) for n, (s, t) in self.model_spec.items()}
            object.__setattr__(self, "model_spec", spec)
