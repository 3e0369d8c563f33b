"""Errors the data pipeline raises, kept apart so callers can catch them without importing readers."""

from __future__ import annotations

from gossip_tts.data.sample import CodecInfo


class ShardMismatchError(ValueError):
    """A shard's latents live in another latent space (codec, dim or frame rate) than the run.

    Mixing latent spaces silently would train on garbage, so this is the one data fault
    that stops a stream instead of being skipped.
    """

    def __init__(self, shard: str, found: CodecInfo, expected: CodecInfo, key: str | None = None) -> None:
        where = f"shard {shard}" + (f", sample {key!r}" if key else "")
        super().__init__(
            f"{where} holds latents of codec {found.codec!r} (latent_dim {found.latent_dim}, "
            f"frame_rate {found.frame_rate:g}) but this run uses codec {expected.codec!r} "
            f"(latent_dim {expected.latent_dim}, frame_rate {expected.frame_rate:g}); "
            "re-encode the data with the run's codec or point the run at matching shards"
        )
        self.shard = shard
        self.found = found
        self.expected = expected


class SourceError(OSError):
    """A shard source (folder, file or URL) cannot be listed or opened.

    `status` holds the HTTP status when a server answered with an error, else None.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class EmptyStreamError(RuntimeError):
    """A whole pass over the shards gave no usable sample, so looping again would spin forever."""


def empty_stream_message(sources: list[str], shards: int, stats: dict[str, int]) -> str:
    """Why a pass gave nothing, and what to do: the likeliest cause is tars of raw audio."""
    where = ", ".join(sources)
    if stats.get("skipped_missing_field", 0) and not stats.get("samples", 0):
        return (f"--data {where}: {shards} tar(s) but no latent sample in them ({stats['skipped_missing_field']} "
                "entries lack the .npy latents and .json of a packed sample; raw-audio tars?); pack recordings "
                "first: gossip-tts pack SRC_DIR OUT_DIR, then --data OUT_DIR")
    counts = ", ".join(f"{k} {v}" for k, v in stats.items() if v and k.startswith(("skipped_", "shard_")))
    return (f"--data {where}: a whole pass over {shards} shard(s) gave no usable sample ({counts or 'none read'}); "
            "check the tars (gossip-tts pack writes them) or point --data at others")


class SourceTimeout(SourceError):
    """A shard or listing went past its deadline, or sent nothing for the stall timeout."""


class SourceAborted(SourceError):
    """A read was cut short because its stream was closed (the run is stopping)."""


class StopRequested(KeyboardInterrupt):
    """Waiting for data ended because the run was asked to stop (SIGTERM, Ctrl+C).

    A KeyboardInterrupt, so a training loop stuck behind a stalled source leaves the way
    Ctrl+C leaves it: after the last whole step, with a final checkpoint.
    """
