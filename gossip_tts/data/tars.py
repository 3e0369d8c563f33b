"""Writing latent tar shards (webdataset naming), and the format facts the reader shares.

One tar per shard. The first member, `__shard__.json`, records the shard's CodecInfo and
sample count so that a reader refuses a foreign shard before touching its samples. Then,
per sample: `key.npy` (T, D) float16 latent, `key.ref.npy` (T', D) float16 reference
latent from another clip of the same speaker, and `key.json` with `text`,
`target_duration` (T / frame_rate seconds), `speaker`, `codec`, `latent_dim`,
`frame_rate` and any extra fields from `LatentSample.meta`.

Tar headers carry no clock, owner or permissions of the writing machine, so the same
samples give byte-identical shards anywhere (shards can then be named by content hash).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import tarfile
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from gossip_tts.data.sample import CodecInfo, LatentSample

SHARD_INFO_NAME = "__shard__.json"
FORMAT = "gossip-tts-latents-v1"
# The header is written before the sample count is known and patched in place on close;
# a fixed-size, space-padded body keeps the tar header (which records the size) valid.
_SHARD_INFO_BYTES = 512
_KEY_RE = re.compile(r"^[A-Za-z0-9_\-]+$")
_RESERVED_FIELDS = ("text", "target_duration", "speaker", "codec", "latent_dim", "frame_rate")


def check_info(info: CodecInfo) -> None:
    """Refuse a CodecInfo that no shard could honestly record."""
    if not isinstance(info.codec, str) or not info.codec:
        raise ValueError(f"codec name must be a non-empty string, got {info.codec!r}")
    if not isinstance(info.latent_dim, int) or isinstance(info.latent_dim, bool) or info.latent_dim <= 0:
        raise ValueError(f"latent_dim must be a positive int, got {info.latent_dim!r}")
    fr = float(info.frame_rate)
    if not math.isfinite(fr) or fr <= 0:
        raise ValueError(f"frame_rate must be positive and finite, got {info.frame_rate!r}")


def info_to_dict(info: CodecInfo) -> dict[str, Any]:
    return {"codec": info.codec, "latent_dim": int(info.latent_dim), "frame_rate": float(info.frame_rate)}


def same_info(a: CodecInfo, b: CodecInfo) -> bool:
    """Equal latent spaces; frame rates compare with a tolerance because they pass through JSON."""
    return (
        a.codec == b.codec
        and int(a.latent_dim) == int(b.latent_dim)
        and math.isclose(float(a.frame_rate), float(b.frame_rate), rel_tol=1e-6)
    )


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mtime = 0
    ti.mode = 0o644
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _shard_info_body(info: CodecInfo, samples: int) -> bytes:
    body = json.dumps({"format": FORMAT, **info_to_dict(info), "samples": samples}, sort_keys=True).encode()
    if len(body) > _SHARD_INFO_BYTES:
        raise ValueError(f"codec name too long to record in the shard header: {info.codec!r}")
    return body + b" " * (_SHARD_INFO_BYTES - len(body))


class ShardWriter:
    """Writes LatentSamples into `prefix-000000.tar`, `prefix-000001.tar`, ... of `shard_size` each.

    Each tar is written to a hidden temporary file and renamed into place when full, so a
    reader (or a crash) never sees half a shard. Leaving the `with` block on an exception
    drops the unfinished shard and keeps the finished ones.
    """

    def __init__(self, out_dir: str | Path, info: CodecInfo, shard_size: int = 256, prefix: str = "shard") -> None:
        check_info(info)
        if shard_size <= 0:
            raise ValueError(f"shard_size must be positive, got {shard_size}")
        if not _KEY_RE.match(prefix):
            raise ValueError(f"prefix must be letters, digits, '_' or '-', got {prefix!r}")
        _shard_info_body(info, 10**12)  # fail now, not at the first close, on an unrecordable info
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.info = info
        self.shard_size = shard_size
        self.prefix = prefix
        self._paths: list[Path] = []
        self._keys: set[str] = set()
        self._tar: tarfile.TarFile | None = None
        self._file: io.BufferedRandom | None = None
        self._tmp: Path | None = None
        self._count = 0
        self._closed = False

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.close()
        else:
            self._abort()
            self._closed = True

    @property
    def paths(self) -> list[Path]:
        """Shards finished so far."""
        return list(self._paths)

    def write(self, sample: LatentSample) -> None:
        """Validate and append one sample; a bad sample raises ValueError and writes nothing."""
        if self._closed:
            raise RuntimeError("ShardWriter is closed")
        members = self._encode(sample)
        if self._tar is None:
            self._open_shard()
        assert self._tar is not None
        for name, data in members:
            self._tar.addfile(_tarinfo(name, len(data)), io.BytesIO(data))
        self._keys.add(sample.key)
        self._count += 1
        if self._count >= self.shard_size:
            self._finish_shard()

    def close(self) -> list[Path]:
        """Finish the last shard; returns every shard path written, in order."""
        if not self._closed:
            self._finish_shard()
            self._closed = True
        return list(self._paths)

    def _encode(self, s: LatentSample) -> list[tuple[str, bytes]]:
        if not isinstance(s.key, str) or not _KEY_RE.match(s.key) or s.key.startswith("__") or len(s.key) > 80:
            raise ValueError(
                f"sample key must be 1-80 letters, digits, '_' or '-' (not starting '__'), got {s.key!r}"
            )
        if s.key in self._keys:
            raise ValueError(f"duplicate sample key {s.key!r}")
        if not isinstance(s.text, str):
            raise ValueError(f"sample {s.key!r}: text must be a string")
        latent = self._as_f16(s.key, "latent", s.latent)
        ref = self._as_f16(s.key, "ref", s.ref)
        meta = dict(s.meta)
        for name, want in info_to_dict(self.info).items():
            if name in meta and meta[name] != want and not (name == "frame_rate" and math.isclose(float(meta[name]), want)):
                raise ValueError(f"sample {s.key!r}: meta {name}={meta[name]!r} contradicts the writer's {want!r}")
        fields = {
            **{k: v for k, v in meta.items() if k not in _RESERVED_FIELDS},
            "text": s.text,
            "target_duration": latent.shape[0] / float(self.info.frame_rate),
            "speaker": str(s.speaker),
            **info_to_dict(self.info),
        }
        try:
            js = json.dumps(fields, sort_keys=True, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise ValueError(f"sample {s.key!r}: meta is not plain JSON: {e}") from e
        return [(f"{s.key}.npy", npy_bytes(latent)), (f"{s.key}.ref.npy", npy_bytes(ref)), (f"{s.key}.json", js)]

    def _as_f16(self, key: str, what: str, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)
        if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] != self.info.latent_dim:
            raise ValueError(f"sample {key!r}: {what} must be (T>0, {self.info.latent_dim}), got {a.shape}")
        if not np.issubdtype(a.dtype, np.floating):
            raise ValueError(f"sample {key!r}: {what} must be floating point, got {a.dtype}")
        with np.errstate(over="ignore", invalid="ignore"):
            out = a.astype(np.float16)
        if not np.isfinite(out).all():
            raise ValueError(f"sample {key!r}: {what} has NaN/inf values or values beyond float16 range")
        return out

    def _open_shard(self) -> None:
        name = f"{self.prefix}-{len(self._paths):06d}.tar"
        self._tmp = self.out_dir / f".{name}.tmp-{os.getpid()}"
        self._file = open(self._tmp, "w+b")
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)
        body = _shard_info_body(self.info, 0)
        self._tar.addfile(_tarinfo(SHARD_INFO_NAME, len(body)), io.BytesIO(body))
        self._count = 0

    def _finish_shard(self) -> None:
        if self._tar is None or self._file is None or self._tmp is None:
            return
        self._tar.close()  # writes the end-of-archive blocks; leaves our file open
        self._file.seek(tarfile.BLOCKSIZE)  # the header member's body starts after its one header block
        self._file.write(_shard_info_body(self.info, self._count))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        final = self.out_dir / f"{self.prefix}-{len(self._paths):06d}.tar"
        os.replace(self._tmp, final)
        self._paths.append(final)
        self._tar = self._file = self._tmp = None
        self._count = 0

    def _abort(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
        self._tar = self._file = self._tmp = None
