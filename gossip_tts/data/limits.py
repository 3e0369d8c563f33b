"""`DataLimits`: what one untrusted shard source may cost a peer in memory and in time.

A shard is input from anywhere (a file someone handed over, an http server that may be
hostile), so every size the reader is about to trust is checked before it is read, every
buffer between the tar and the batch is bounded in bytes as well as in items, and every
read has a deadline. The `[data]` section of `gossip-tts peer` settings (env vars
`GOSSIP_TTS_DATA_<FIELD>`). Imports nothing heavy: `--help` and `--print-config` read it.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass
class DataLimits:
    """Bounds on reading latent tars; each refusal is counted and logged with its reason."""

    max_sample_bytes: int = 16 * MiB
    """Most bytes one sample's members (key.npy + key.ref.npy + key.json) may hold together,
    checked from the tar headers before any is read; a larger sample is skipped unread
    (`skipped_too_large`). Other members of a key are never read."""
    max_json_bytes: int = 64 << 10
    """Most bytes of a sample's key.json or a shard's header member (JSON expands several
    times in memory once parsed); a larger one is skipped unread (`skipped_too_large`)."""
    max_header_bytes: int = 64 << 10
    """Most bytes of a GNU long-name/long-link member or a pax extended header; a tar
    header claiming more ends that shard before the body is read (`shard_errors`)."""
    prefetch_bytes: int = 128 * MiB
    """Most decoded sample bytes waiting in the prefetch queue (besides its item count)."""
    shuffle_buffer_bytes: int = 128 * MiB
    """Most decoded sample bytes held by the shuffle buffer (besides its item count)."""
    bucket_bytes: int = 512 * MiB
    """Most decoded sample bytes gathered into one duration bucket before it is batched."""
    stall_timeout_s: float = 30.0
    """Longest wait for the next bytes of an http(s) shard or listing, and to connect."""
    shard_deadline_s: float = 600.0
    """Most wall time one shard (or one http listing) may take to read, however steadily its
    bytes trickle in; a slower one is abandoned and counted (`shard_timeouts`)."""

    def __post_init__(self) -> None:
        for name in ("max_sample_bytes", "max_json_bytes", "max_header_bytes", "prefetch_bytes",
                     "shuffle_buffer_bytes", "bucket_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive number of bytes, got {value!r}")
        for name in ("stall_timeout_s", "shard_deadline_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")
