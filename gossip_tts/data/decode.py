"""Turning one sample's tar members into a LatentSample, refusing whatever cannot be trusted.

Every check happens before the matching allocation: an .npy header is read and its shape
compared with the bytes actually present before numpy allocates the array (a header may
claim terabytes), objects are never unpickled, JSON nesting cannot exhaust the stack.
A refusal raises `Bad` with the stats counter it belongs to.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any, Callable

import numpy as np
from numpy.lib import format as npy_format

from gossip_tts.data.sample import CodecInfo, LatentSample

CORRUPT = "skipped_corrupt"
NONFINITE = "skipped_nonfinite"
MISSING = "skipped_missing_field"
TOO_LARGE = "skipped_too_large"
KEPT_MEMBERS = ("npy", "ref.npy", "json")
"""The members of a sample the reader keeps; any other member of a key is skipped unread."""


class Bad(Exception):
    """A sample that cannot be used, with the stats counter it belongs to."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def load_npy(data: bytes, what: str) -> np.ndarray:
    """A non-empty 2-D float array from .npy bytes whose header matches the bytes present."""
    f = io.BytesIO(data)
    try:
        version = npy_format.read_magic(f)
        read_header = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
        shape, _fortran, dtype = read_header(f)
    except (ValueError, EOFError, OSError, TypeError, SyntaxError) as e:
        raise Bad(CORRUPT, f"{what} is not a readable .npy: {e}") from None
    if dtype.hasobject or not np.issubdtype(dtype, np.floating) or len(shape) != 2 or shape[0] == 0:
        raise Bad(CORRUPT, f"{what} must be a non-empty 2-D float array, got {dtype} {shape}")
    need = int(shape[0]) * int(shape[1]) * dtype.itemsize
    if need > len(data) - f.tell():
        raise Bad(CORRUPT, f"{what}'s header says {shape} {dtype} ({need} bytes) but only {len(data) - f.tell()} follow")
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError, TypeError) as e:
        raise Bad(CORRUPT, f"{what} is not a readable .npy: {e}") from None


def json_info(meta: dict[str, Any]) -> CodecInfo | None:
    """The latent space a sample's (or shard header's) JSON names, None when it names none."""
    names = ("codec", "latent_dim", "frame_rate")
    if not any(n in meta for n in names):
        return None
    if not all(n in meta for n in names):
        raise Bad(MISSING, f"json has only some of {names}")
    codec, dim, fr = meta["codec"], meta["latent_dim"], meta["frame_rate"]
    if not isinstance(codec, str) or not isinstance(dim, int) or isinstance(dim, bool) or not isinstance(fr, (int, float)):
        raise Bad(CORRUPT, f"json codec fields have wrong types: {codec!r}, {dim!r}, {fr!r}")
    if not (math.isfinite(fr) and fr > 0 and dim > 0):
        raise Bad(CORRUPT, f"json codec fields out of range: latent_dim {dim!r}, frame_rate {fr!r}")
    return CodecInfo(codec, dim, float(fr))


def load_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"), parse_constant=lambda c: float("nan"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise Bad(CORRUPT, f"{what} is unreadable: {type(e).__name__}: {e}") from None


def decode_sample(
    key: str, parts: dict[str, bytes], shard_info: CodecInfo | None, check: Callable[[CodecInfo], CodecInfo]
) -> LatentSample:
    """The sample in `parts` ({ext: bytes}); `check` enforces the run's latent space on a JSON that names one."""
    for ext in KEPT_MEMBERS:
        if ext not in parts:
            raise Bad(MISSING, f"no {key}.{ext} member")
    meta = load_json(parts["json"], "json")
    if not isinstance(meta, dict):
        raise Bad(CORRUPT, "json is not an object")
    for name in ("text", "target_duration"):
        if name not in meta:
            raise Bad(MISSING, f"json has no {name!r}")
    text, dur = meta.pop("text"), meta["target_duration"]
    if not isinstance(text, str):
        raise Bad(CORRUPT, f"text is {type(text).__name__}, not a string")
    if not isinstance(dur, (int, float)) or isinstance(dur, bool) or not math.isfinite(dur) or dur < 0:
        raise Bad(CORRUPT, f"target_duration {dur!r} is not a non-negative number")
    speaker = meta.pop("speaker", "")
    found = json_info(meta)
    if found is not None:
        info = check(found)
    elif shard_info is not None:
        info = shard_info
    else:
        raise Bad(MISSING, "neither the sample json nor the shard header names the codec")
    arrays = []
    for what, ext in (("latent", "npy"), ("ref", "ref.npy")):
        a = load_npy(parts[ext], what)
        if a.shape[1] != info.latent_dim:
            raise Bad(CORRUPT, f"{what} has {a.shape[1]} dims, the shard says {info.latent_dim}")
        # before the check: isfinite on float16 is far slower (docs/benchmarks/peer.md#finiteness-checks-and-index-decoding)
        a = a.astype(np.float32)
        if not np.isfinite(a).all():
            raise Bad(NONFINITE, f"{what} holds NaN or inf")
        arrays.append(a)
    meta.update(codec=info.codec, latent_dim=info.latent_dim, frame_rate=info.frame_rate)
    return LatentSample(key=key, latent=arrays[0], ref=arrays[1], text=text, speaker=str(speaker), meta=meta)
