"""Latent tar shards: writing, streaming with prefetch, whole-clip batching, text front ends, the built-in corpus.

Importing the package does not import torch (the settings of `gossip-tts peer` read
`DataLimits` from it, and `--help` must answer at once): `ensure_builtin_corpus`, which
needs torch, is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gossip_tts.data.batch import Batch
from gossip_tts.data.collate import BatcherConfig, CollateConfig, DurationBatcher, collate
from gossip_tts.data.errors import EmptyStreamError, ShardMismatchError, SourceError, StopRequested
from gossip_tts.data.limits import DataLimits
from gossip_tts.data.reader import LatentStream, StreamConfig
from gossip_tts.data.sample import CodecInfo, LatentSample
from gossip_tts.data.sources import list_shards, open_shard
from gossip_tts.data.tars import ShardWriter
from gossip_tts.data.text import TEXT_FRONTENDS, encode_text

if TYPE_CHECKING:
    from gossip_tts.data.builtin import ensure_builtin_corpus

__all__ = [
    "Batch",
    "BatcherConfig",
    "CodecInfo",
    "CollateConfig",
    "DataLimits",
    "DurationBatcher",
    "EmptyStreamError",
    "LatentSample",
    "LatentStream",
    "ShardMismatchError",
    "ShardWriter",
    "SourceError",
    "StopRequested",
    "StreamConfig",
    "TEXT_FRONTENDS",
    "collate",
    "encode_text",
    "ensure_builtin_corpus",
    "list_shards",
    "open_shard",
]


def __getattr__(name: str) -> Any:
    if name == "ensure_builtin_corpus":
        from gossip_tts.data.builtin import ensure_builtin_corpus

        return ensure_builtin_corpus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
