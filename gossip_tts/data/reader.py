"""Streaming latent tars into LatentSamples: per-peer shard order, shuffle buffer, prefetch.

A tar is read sequentially (`tarfile` stream mode), so an http(s) shard is never
downloaded whole first. Bad data is skipped and counted by reason in `stats`, and each bad
sample is logged once. The one fatal fault is a shard from another latent space
(ShardMismatchError): training on it would be silently wrong.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import tarfile
import threading
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from gossip_tts.data.errors import EmptyStreamError, ShardMismatchError, SourceError
from gossip_tts.data.prefetch import Prefetcher
from gossip_tts.data.sample import CodecInfo, LatentSample
from gossip_tts.data.sources import list_shards, open_shard
from gossip_tts.data.tars import SHARD_INFO_NAME, check_info, same_info

log = logging.getLogger(__name__)

# webdataset's rule: the key is the path up to the first dot of the file name.
_MEMBER_RE = re.compile(r"^((?:.*/|)[^./]+)\.([^/]+)$")
_MAX_LOGGED = 10_000

CORRUPT = "skipped_corrupt"
NONFINITE = "skipped_nonfinite"
MISSING = "skipped_missing_field"


@dataclass
class StreamConfig:
    """What a LatentStream reads and in which order."""

    sources: list[str]
    """Folders, .tar files, shard lists or http(s) URLs (see `gossip_tts.data.sources`)."""
    info: CodecInfo | None = None
    """The run's latent space; None takes it from the first shard and then enforces it."""
    seed: int = 0
    """Seeds shard order and the shuffle buffer, so each peer reads its own order."""
    shuffle_shards: bool = True
    """Permute the shard list every pass (else read it in listed order)."""
    shuffle_buffer: int = 64
    """Samples held to shuffle across shard boundaries; 0 or 1 keeps tar order."""
    loop: bool = True
    """Start a new pass after the last shard (False ends after one pass)."""
    prefetch: int = 256
    """Samples decoded ahead by the background thread."""
    timeout_s: float = 30.0
    """Network timeout for listing and reading http(s) shards."""
    max_member_bytes: int = 256 << 20
    """A tar member larger than this is skipped unread (a shard is untrusted input)."""

    def __post_init__(self) -> None:
        if isinstance(self.sources, str):
            self.sources = [self.sources]
        self.sources = [str(s) for s in self.sources]
        if not self.sources:
            raise ValueError("StreamConfig.sources is empty: give at least one folder, .tar or URL")
        if self.info is not None:
            check_info(self.info)
        if self.shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer must be >= 0, got {self.shuffle_buffer}")
        if self.prefetch <= 0:
            raise ValueError(f"prefetch must be positive, got {self.prefetch}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.max_member_bytes <= 0:
            raise ValueError(f"max_member_bytes must be positive, got {self.max_member_bytes}")


class _Bad(Exception):
    """A sample that cannot be used, with the stats counter it belongs to."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _load_npy(data: bytes, what: str) -> np.ndarray:
    try:
        a = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError, TypeError) as e:
        raise _Bad(CORRUPT, f"{what} is not a readable .npy: {e}") from None
    if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.floating) or a.ndim != 2 or a.shape[0] == 0:
        raise _Bad(CORRUPT, f"{what} must be a non-empty 2-D float array, got {getattr(a, 'dtype', '?')} {getattr(a, 'shape', '?')}")
    return a


def _json_info(meta: dict[str, Any]) -> CodecInfo | None:
    names = ("codec", "latent_dim", "frame_rate")
    if not any(n in meta for n in names):
        return None
    if not all(n in meta for n in names):
        raise _Bad(MISSING, f"json has only some of {names}")
    codec, dim, fr = meta["codec"], meta["latent_dim"], meta["frame_rate"]
    if not isinstance(codec, str) or not isinstance(dim, int) or isinstance(dim, bool) or not isinstance(fr, (int, float)):
        raise _Bad(CORRUPT, f"json codec fields have wrong types: {codec!r}, {dim!r}, {fr!r}")
    if not (math.isfinite(fr) and fr > 0 and dim > 0):
        raise _Bad(CORRUPT, f"json codec fields out of range: latent_dim {dim!r}, frame_rate {fr!r}")
    return CodecInfo(codec, dim, float(fr))


class LatentStream:
    """An iterable of LatentSamples (float32 arrays) over shards, read by a background thread.

    Iterating starts a fresh pass from the seed (and stops any pass still running);
    `close()` or leaving the `with` block stops and joins the thread.
    `stats` counts samples, shards read, shards that failed (`shard_errors`) and skipped
    samples by reason; a sample met again on a later pass is counted again, logged once.
    """

    def __init__(self, cfg: StreamConfig) -> None:
        self.cfg = cfg
        self.info: CodecInfo | None = cfg.info
        self.stats: dict[str, int] = {
            "samples": 0,
            "shards": 0,
            "shard_errors": 0,
            CORRUPT: 0,
            NONFINITE: 0,
            MISSING: 0,
        }
        self._logged: set[tuple[str, str, str]] = set()
        self._prefetcher: Prefetcher[LatentSample] | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> "LatentStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the prefetch thread and wait for it."""
        with self._lock:
            pf, self._prefetcher = self._prefetcher, None
        if pf is not None:
            pf.close()

    def __iter__(self) -> Iterator[LatentSample]:
        self.close()
        pf: Prefetcher[LatentSample] = Prefetcher(
            self._produce, self.cfg.prefetch, name="latent-stream", join_timeout_s=self.cfg.timeout_s + 5
        )
        with self._lock:
            self._prefetcher = pf
        try:
            yield from pf
        finally:
            pf.close()

    # --- producer side (runs in the prefetch thread) ---

    def _warn_once(self, reason: str, shard: str, key: str, detail: str) -> None:
        if (reason, shard, key) in self._logged:
            return
        if len(self._logged) >= _MAX_LOGGED:
            if len(self._logged) == _MAX_LOGGED:
                self._logged.add(("", "", ""))
                log.warning("over %d bad samples or shards; further ones are only counted in stats", _MAX_LOGGED)
            return
        self._logged.add((reason, shard, key))
        if key:
            log.warning("%s: shard %s, key %r: %s", reason, shard, key, detail)
        else:
            log.warning("%s: %s: %s", reason, shard, detail)

    def _skip(self, reason: str, shard: str, key: str, detail: str) -> None:
        self.stats[reason] += 1
        self._warn_once(reason, shard, key, detail)

    def _check(self, shard: str, found: CodecInfo, key: str | None = None) -> CodecInfo:
        if self.info is None:
            self.info = found
            log.info("latent space taken from shard %s: %s", shard, found)
        elif not same_info(found, self.info):
            raise ShardMismatchError(shard, found, self.info, key)
        return self.info

    def _list(self, previous: list[str] | None) -> list[str]:
        shards: list[str] = []
        try:
            for src in self.cfg.sources:
                shards.extend(list_shards(src, timeout=self.cfg.timeout_s))
        except SourceError as e:
            if previous is None:
                raise
            self._warn_once("relist_failed", ", ".join(self.cfg.sources), "", f"keeping the previous shard list: {e}")
            return previous
        return list(dict.fromkeys(shards))

    def _produce(self, stop: threading.Event) -> Iterator[LatentSample]:
        rng = np.random.default_rng(self.cfg.seed)
        buf: list[LatentSample] = []
        shards: list[str] | None = None
        while not stop.is_set():
            shards = self._list(shards)
            order = rng.permutation(len(shards)) if self.cfg.shuffle_shards else np.arange(len(shards))
            got = 0
            for i in order:
                for sample in self._read_shard(shards[int(i)], stop):
                    got += 1
                    if self.cfg.shuffle_buffer <= 1:
                        yield sample
                        continue
                    buf.append(sample)
                    if len(buf) >= self.cfg.shuffle_buffer:
                        j = int(rng.integers(len(buf)))
                        buf[j], buf[-1] = buf[-1], buf[j]
                        yield buf.pop()
                if stop.is_set():
                    return
            if got == 0 and self.cfg.loop:
                raise EmptyStreamError(f"a whole pass over {len(shards)} shard(s) gave no usable sample; see stats {self.stats}")
            if not self.cfg.loop:
                break
        rng.shuffle(buf)  # type: ignore[arg-type]
        yield from buf

    def _read_shard(self, shard: str, stop: threading.Event) -> Iterator[LatentSample]:
        try:
            f = open_shard(shard, timeout=self.cfg.timeout_s)
        except SourceError as e:
            self.stats["shard_errors"] += 1
            self._warn_once("shard_errors", shard, "", str(e))
            return
        key: str | None = None
        parts: dict[str, bytes] = {}
        bad: str | None = None
        shard_info: CodecInfo | None = None
        with f:
            try:
                with tarfile.open(fileobj=f, mode="r|") as tf:
                    first = True
                    for m in tf:
                        if stop.is_set():
                            return
                        if first and m.name == SHARD_INFO_NAME:
                            first = False
                            shard_info = self._shard_header(shard, tf, m)
                            continue
                        first = False
                        if not m.isfile():
                            continue
                        match = _MEMBER_RE.match(m.name)
                        if match is None:
                            continue
                        k, ext = match.group(1), match.group(2)
                        if k != key:
                            if key is not None:
                                yield from self._finish(shard, key, parts, bad, shard_info)
                            key, parts, bad = k, {}, None
                        if ext in parts:
                            bad = f"member {m.name} appears twice"
                        elif m.size > self.cfg.max_member_bytes:
                            bad = f"member {m.name} is {m.size} bytes, over the {self.cfg.max_member_bytes} limit"
                        else:
                            fm = tf.extractfile(m)
                            parts[ext] = fm.read() if fm is not None else b""
                    if key is not None:
                        yield from self._finish(shard, key, parts, bad, shard_info)
                        key = None
                self.stats["shards"] += 1
            except (tarfile.TarError, EOFError, OSError) as e:
                self.stats["shard_errors"] += 1
                self._warn_once("shard_errors", shard, "", f"unreadable or truncated tar ({type(e).__name__}: {e})")
                if key is not None and bad is None and all(x in parts for x in ("npy", "ref.npy", "json")):
                    yield from self._finish(shard, key, parts, bad, shard_info)
                elif key is not None:
                    self._skip(CORRUPT, shard, key, "sample cut off by the broken tar")

    def _shard_header(self, shard: str, tf: tarfile.TarFile, m: tarfile.TarInfo) -> CodecInfo | None:
        """Checks the shard's recorded latent space before any sample is read."""
        try:
            fm = tf.extractfile(m)
            head = json.loads((fm.read(64 << 10) if fm is not None else b"").decode("utf-8"))
            found = _json_info(head if isinstance(head, dict) else {})
        except (ValueError, _Bad) as e:
            self._warn_once("bad_shard_header", shard, SHARD_INFO_NAME, f"ignoring an unreadable shard header: {e}")
            return None
        return self._check(shard, found) if found is not None else None

    def _finish(
        self, shard: str, key: str, parts: dict[str, bytes], bad: str | None, shard_info: CodecInfo | None
    ) -> Iterator[LatentSample]:
        try:
            if bad is not None:
                raise _Bad(CORRUPT, bad)
            sample = self._decode(shard, key, parts, shard_info)
        except _Bad as e:
            self._skip(e.reason, shard, key, str(e))
            return
        self.stats["samples"] += 1
        yield sample

    def _decode(self, shard: str, key: str, parts: dict[str, bytes], shard_info: CodecInfo | None) -> LatentSample:
        for ext in ("npy", "ref.npy", "json"):
            if ext not in parts:
                raise _Bad(MISSING, f"no {key}.{ext} member")
        try:
            meta = json.loads(parts["json"].decode("utf-8"), parse_constant=lambda c: float("nan"))
        except (UnicodeDecodeError, ValueError) as e:
            raise _Bad(CORRUPT, f"json is unreadable: {e}") from None
        if not isinstance(meta, dict):
            raise _Bad(CORRUPT, "json is not an object")
        for name in ("text", "target_duration"):
            if name not in meta:
                raise _Bad(MISSING, f"json has no {name!r}")
        text, dur = meta.pop("text"), meta["target_duration"]
        if not isinstance(text, str):
            raise _Bad(CORRUPT, f"text is {type(text).__name__}, not a string")
        if not isinstance(dur, (int, float)) or isinstance(dur, bool) or not math.isfinite(dur) or dur < 0:
            raise _Bad(CORRUPT, f"target_duration {dur!r} is not a non-negative number")
        speaker = meta.pop("speaker", "")
        found = _json_info(meta)
        if found is not None:
            info = self._check(shard, found, key)
        elif shard_info is not None:
            info = shard_info
        else:
            raise _Bad(MISSING, "neither the sample json nor the shard header names the codec")
        arrays = []
        for what, ext in (("latent", "npy"), ("ref", "ref.npy")):
            a = _load_npy(parts[ext], what)
            if a.shape[1] != info.latent_dim:
                raise _Bad(CORRUPT, f"{what} has {a.shape[1]} dims, the shard says {info.latent_dim}")
            a = a.astype(np.float32)  # before the check: isfinite on float16 is 20x slower
            if not np.isfinite(a).all():
                raise _Bad(NONFINITE, f"{what} holds NaN or inf")
            arrays.append(a)
        meta.update(codec=info.codec, latent_dim=info.latent_dim, frame_rate=info.frame_rate)
        return LatentSample(
            key=key,
            latent=arrays[0],
            ref=arrays[1],
            text=text,
            speaker=str(speaker),
            meta=meta,
        )
