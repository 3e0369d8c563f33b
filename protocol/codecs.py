"""Tensor codecs: the compressors C (and their inverses D) of compressed gossip.

One interface, `TensorCodec`, and a parser from spec strings, so a codec can be named on
the command line and in a frame header. The names, their grammar and canonical forms are
the codec table's (`protocol.codec_table`, docs/wire.md#tensor-codecs):
"int8:block=256" -> "int8", "topk:0.0100+fp16" -> "topk:0.01". Error bounds are stated on
each class.
"""

from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

import numpy as np
import torch

from .codec_table import MAX_SPEC_CHARS, SpecParts, read_spec
from .codecs_dense import BF16Codec, CodecBase, FP16Codec, IdentityCodec, Int8Codec
from .codecs_sparse import SparseCodec
from .sparse import SparseVector

__all__ = ["TensorCodec", "parse_codec", "IdentityCodec", "FP16Codec", "BF16Codec",
           "Int8Codec", "SparseCodec", "CodecBase", "MAX_SPEC_CHARS"]


@runtime_checkable
class TensorCodec(Protocol):
    """Compress a 1-D float32 or bfloat16 tensor (read as its exact float32 widening) into named
    arrays; `compress` also returns exactly what `decompress` will rebuild, so the sender's error
    feedback is exact."""

    spec: str

    def compress(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], torch.Tensor]: ...

    def decompress(self, packed: dict[str, np.ndarray], numel: int, seed: int = 0) -> torch.Tensor: ...

    def compress_sparse(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], SparseVector]: ...

    def decompress_sparse(self, packed: dict[str, np.ndarray], numel: int, seed: int = 0) -> SparseVector: ...

    def expected_ratio(self, numel: int) -> float: ...


def _built(parts: SpecParts, spec: str, values: Optional[CodecBase] = None) -> CodecBase:
    try:
        return parts.kind.build(parts.argument, values)
    except ValueError as exc:
        if parts.kind.sparse:
            raise ValueError(f"{exc} (in {spec!r})") from None
        raise ValueError(f"bad {parts.kind.name} argument {parts.argument!r} in {spec!r}; {exc}") from None


def parse_codec(spec: str) -> CodecBase:
    """The codec a spec string names (`protocol.codec_table`); ValueError naming the bad part otherwise."""
    parts = read_spec(spec)
    if parts.values is None:
        return _built(parts, spec)
    return _built(parts, spec, _built(parts.values, spec))
