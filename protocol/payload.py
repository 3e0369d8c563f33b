"""The frame payload: named numpy arrays in a safetensors container, wrapped in lz4.

safetensors (a JSON index + raw little-endian bytes) holds arrays without pickle. Writing
uses the library; reading is done here, strictly and within `Limits`, so that bytes from a
peer reach no parser we do not bound: only the dtypes the codecs emit, 1-D arrays, and
data offsets that tile the buffer exactly (no gaps, overlaps or hidden bytes).
lz4 (frame format) only pays on sparse payloads; on dense fp16/int8 data it costs a
stored-block header per 64 KiB.
"""

from __future__ import annotations

import json
import struct

import lz4.frame
import numpy as np
import safetensors.numpy

from .errors import FrameRefused, RefusalReason
from .limits import Limits

__all__ = ["pack_payload", "unpack_payload", "lz4_decompress_bounded"]

_DTYPES = {"F32": np.float32, "F16": np.float16, "I8": np.int8, "U8": np.uint8,
           "U16": np.uint16, "U32": np.uint32, "I32": np.int32, "I64": np.int64}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}


def pack_payload(packed: dict[str, np.ndarray]) -> bytes:
    """lz4(safetensors(packed)); arrays must be 1-D with a dtype listed in `_DTYPES`."""
    arrays = {}
    for name, arr in packed.items():
        if not isinstance(name, str) or not isinstance(arr, np.ndarray):
            raise TypeError("packed must map str names to numpy arrays")
        if arr.ndim != 1 or arr.dtype not in _CODES:
            raise ValueError(f"packed array {name!r}: {arr.dtype} {arr.shape} is not a 1-D "
                             f"array of {sorted(_DTYPES)}")
        arrays[name] = np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"), copy=False))
    return lz4.frame.compress(safetensors.numpy.save(arrays), compression_level=0,
                              store_size=True)


def lz4_decompress_bounded(data: bytes | memoryview, limit: int) -> bytes:
    """Decompress one lz4 frame, never producing (or allocating for) more than `limit` bytes.

    The content size stored in an lz4 frame is the sender's claim, and the python-lz4
    decompressor allocates `max_length` up front: so the first draw is the claimed size
    (refused if over `limit`), and any output past it is drawn in growing chunks.
    """
    decompressor = lz4.frame.LZ4FrameDecompressor()
    chunks: list[bytes] = []
    total, pending = 0, data
    try:
        claimed = lz4.frame.get_frame_info(data)["content_size"]
        if claimed > limit:
            raise FrameRefused(RefusalReason.DECOMPRESSED_TOO_LARGE,
                               f"payload claims {claimed} bytes, limit {limit}")
        chunk = claimed + 1 if claimed else 1 << 20
        while True:
            out = decompressor.decompress(pending, max_length=min(chunk, limit + 1 - total))
            pending = b""
            chunks.append(out)
            total += len(out)
            if total > limit:
                raise FrameRefused(RefusalReason.DECOMPRESSED_TOO_LARGE,
                                   f"payload expands past {limit} bytes")
            if decompressor.eof:
                break
            if decompressor.needs_input:
                raise FrameRefused(RefusalReason.DECOMPRESSION_FAILED, "lz4 frame is incomplete")
            chunk = min(max(chunk, 1 << 20) * 2, 64 << 20)
    except RuntimeError as exc:
        raise FrameRefused(RefusalReason.DECOMPRESSION_FAILED, str(exc)) from None
    if decompressor.unused_data:
        raise FrameRefused(RefusalReason.DECOMPRESSION_FAILED, "bytes after the lz4 frame")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _bad(detail: str) -> FrameRefused:
    return FrameRefused(RefusalReason.BAD_PAYLOAD, detail)


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-finite constant {name}")


def _unique_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def unpack_payload(data: bytes | memoryview, limits: Limits) -> dict[str, np.ndarray]:
    """Decompress and parse a payload into read-only arrays, refusing anything irregular."""
    raw = memoryview(lz4_decompress_bounded(data, limits.max_decompressed_bytes))
    if len(raw) < 8:
        raise _bad("safetensors buffer shorter than its length prefix")
    (index_len,) = struct.unpack_from("<Q", raw, 0)
    if index_len > limits.max_header_bytes or 8 + index_len > len(raw):
        raise _bad(f"safetensors index of {index_len} bytes is out of bounds")
    try:
        index = json.loads(bytes(raw[8:8 + index_len]).rstrip(b" ").decode("utf-8"),
                           object_pairs_hook=_unique_pairs, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise _bad(f"safetensors index is not JSON: {exc}") from None
    if not isinstance(index, dict):
        raise _bad("safetensors index is not an object")
    index.pop("__metadata__", None)
    if len(index) > limits.max_packed_arrays:
        raise _bad(f"{len(index)} packed arrays exceed the limit {limits.max_packed_arrays}")
    body = raw[8 + index_len:]
    entries = []
    for name, info in index.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise _bad(f"array {name!r}: malformed index entry")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise _bad(f"array {name!r}: dtype {dtype!r} not allowed")
        if (not isinstance(shape, list) or len(shape) != 1 or type(shape[0]) is not int
                or not isinstance(offsets, list) or len(offsets) != 2
                or any(type(o) is not int for o in offsets)):
            raise _bad(f"array {name!r}: shape/offsets must be a 1-D shape and two ints")
        begin, end = offsets
        itemsize = np.dtype(_DTYPES[dtype]).itemsize
        if not 0 <= begin <= end <= len(body) or end - begin != shape[0] * itemsize:
            raise _bad(f"array {name!r}: offsets {offsets} do not fit shape {shape}")
        entries.append((begin, end, name, dtype, shape[0]))
    entries.sort()
    position = 0
    out: dict[str, np.ndarray] = {}
    for begin, end, name, dtype, length in entries:
        if begin != position:
            raise _bad("safetensors data has gaps or overlaps")
        position = end
        out[name] = np.frombuffer(body, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<"),
                                  count=length, offset=begin)
    if position != len(body):
        raise _bad("safetensors data has trailing bytes")
    return out
