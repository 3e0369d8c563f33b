"""Latent tar shards: writing, streaming with prefetch, whole-clip batching, text front ends, the built-in corpus."""

from gossip_tts.data.batch import Batch
from gossip_tts.data.builtin import ensure_builtin_corpus
from gossip_tts.data.collate import BatcherConfig, CollateConfig, DurationBatcher, collate
from gossip_tts.data.errors import EmptyStreamError, ShardMismatchError, SourceError
from gossip_tts.data.reader import LatentStream, StreamConfig
from gossip_tts.data.sample import CodecInfo, LatentSample
from gossip_tts.data.sources import list_shards, open_shard
from gossip_tts.data.tars import ShardWriter
from gossip_tts.data.text import TEXT_FRONTENDS, encode_text

__all__ = [
    "Batch",
    "BatcherConfig",
    "CodecInfo",
    "CollateConfig",
    "DurationBatcher",
    "EmptyStreamError",
    "LatentSample",
    "LatentStream",
    "ShardMismatchError",
    "ShardWriter",
    "SourceError",
    "StreamConfig",
    "TEXT_FRONTENDS",
    "collate",
    "encode_text",
    "ensure_builtin_corpus",
    "list_shards",
    "open_shard",
]
