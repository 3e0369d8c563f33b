"""The safetensors file layout, written a tensor at a time from the tensors' own memory.

`safetensors.torch.save` returns the whole file as one bytes object, built from a bytes copy of
every tensor: a checkpoint of a trainer's state (parameters, optimiser moments, averaged
weights) held the state twice more while it was written, several copies of the model at the
sizes users train. The layout is small enough to write directly (8-byte little-endian header
length, a JSON header naming each tensor's dtype, shape and byte range, padded with spaces to
8 bytes, then the tensors' bytes in that order); `safetensors` reads what this writes.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO

import numpy as np
import torch

__all__ = ["write_safetensors", "byte_view"]

DTYPE_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}
"""safetensors' names of the dtypes a checkpoint holds."""


def byte_view(t: torch.Tensor) -> np.ndarray:
    """The bytes of a contiguous CPU tensor, as a numpy view (no copy)."""
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("byte_view needs a contiguous CPU tensor")
    return t.reshape(-1).view(torch.uint8).numpy()


def write_safetensors(f: BinaryIO, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write `tensors` (contiguous, on the CPU) and `metadata` to `f` in the safetensors layout,
    in name order, copying no tensor."""
    names = sorted(tensors)
    header: dict[str, object] = {"__metadata__": dict(sorted(metadata.items()))}
    offset = 0
    for name in names:
        t = tensors[name]
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} has no safetensors name here")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    f.write(struct.pack("<Q", len(blob)))
    f.write(blob)
    for name in names:
        if tensors[name].numel():
            f.write(memoryview(byte_view(tensors[name])))
