"""Tensor codecs: the compressors C (and their inverses D) of compressed gossip.

One interface, `TensorCodec`, and a parser from spec strings, so a codec can be named on
the command line and in a frame header. Grammar (canonical forms on the right):

    identity | fp32                 -> "identity"   exact
    fp16 | bf16                     -> "fp16", "bf16"
    int8[:block=B]                  -> "int8" (B = 256) or "int8:block=B"
    topk:F[+V] | randk:F[+V]        -> "topk:0.01", "topk:0.01+int8", "randk:0.01+bf16", ...

F is a plain decimal fraction in (0, 1]; V is a dense codec for the kept values
(default fp16, omitted from the canonical form). Error bounds are stated on each class.
"""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from .codecs_dense import BF16Codec, CodecBase, FP16Codec, IdentityCodec, Int8Codec
from .codecs_sparse import SparseCodec
from .sparse import SparseVector

__all__ = ["TensorCodec", "parse_codec", "IdentityCodec", "FP16Codec", "BF16Codec",
           "Int8Codec", "SparseCodec", "CodecBase", "MAX_SPEC_CHARS"]

MAX_SPEC_CHARS = 64
_GRAMMAR = "identity, fp32, fp16, bf16, int8[:block=N], topk:F[+V], randk:F[+V]"
_FRACTION = re.compile(r"(?:0|[1-9][0-9]{0,8})(?:\.[0-9]{1,12})?")
_BLOCK = re.compile(r"block=([1-9][0-9]{0,5})")


@runtime_checkable
class TensorCodec(Protocol):
    """Compress a 1-D float32 tensor into named arrays; `compress` also returns exactly
    what `decompress` will rebuild, so the sender's error feedback is exact."""

    spec: str

    def compress(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], torch.Tensor]: ...

    def decompress(self, packed: dict[str, np.ndarray], numel: int, seed: int = 0) -> torch.Tensor: ...

    def compress_sparse(self, x: torch.Tensor, seed: int = 0) -> tuple[dict[str, np.ndarray], SparseVector]: ...

    def decompress_sparse(self, packed: dict[str, np.ndarray], numel: int, seed: int = 0) -> SparseVector: ...

    def expected_ratio(self, numel: int) -> float: ...


def _dense(part: str, spec: str) -> CodecBase:
    name, colon, arg = part.partition(":")
    if name in ("identity", "fp32", "fp16", "bf16") and colon:
        raise ValueError(f"codec {name!r} takes no argument, got {part!r} in {spec!r}")
    if name in ("identity", "fp32"):
        return IdentityCodec()
    if name == "fp16":
        return FP16Codec()
    if name == "bf16":
        return BF16Codec()
    if name == "int8":
        if not colon:
            return Int8Codec()
        match = _BLOCK.fullmatch(arg)
        if match is None or int(match.group(1)) > 65536:
            raise ValueError(f"bad int8 argument {arg!r} in {spec!r}; expected block=N, 1 <= N <= 65536")
        return Int8Codec(int(match.group(1)))
    if name in ("topk", "randk"):
        raise ValueError(f"{name!r} cannot encode the values of a sparse codec in {spec!r}")
    raise ValueError(f"unknown codec {part!r} in {spec!r}; expected one of: {_GRAMMAR}")


def parse_codec(spec: str) -> CodecBase:
    """The codec a spec string names; ValueError naming the bad part otherwise."""
    if not isinstance(spec, str):
        raise ValueError(f"codec spec must be a str, got {type(spec).__name__}")
    if not spec or len(spec) > MAX_SPEC_CHARS:
        raise ValueError(f"codec spec must be 1..{MAX_SPEC_CHARS} characters, got {len(spec)}")
    head, plus, values = spec.partition("+")
    name, colon, arg = head.partition(":")
    if name not in ("topk", "randk"):
        if plus:
            raise ValueError(f"'+{values}' in {spec!r}: only topk and randk take a value codec")
        return _dense(head, spec)
    if not colon or _FRACTION.fullmatch(arg) is None:
        raise ValueError(f"bad {name} fraction {arg!r} in {spec!r}; expected a decimal like 0.01")
    if "+" in values:
        raise ValueError(f"too many '+' parts in {spec!r}")
    value_codec = _dense(values, spec) if plus else FP16Codec()
    try:
        return SparseCodec(name, arg, value_codec)
    except ValueError as exc:
        raise ValueError(f"{exc} (in {spec!r})") from None
