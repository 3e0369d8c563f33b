"""Streaming latent tars into LatentSamples: per-peer shard order, shuffle buffer, prefetch.

A tar is read sequentially (`tar_stream.TarReader`), so an http(s) shard is never
downloaded whole first, and every size a header claims is checked against `DataLimits`
before it is read. Bad data is skipped and counted by reason in `stats`, and each bad
sample is logged once. The one fatal fault is a shard from another latent space
(ShardMismatchError): training on it would be silently wrong.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from gossip_tts.data.bounded_read import BoundedReader, OpenReads
from gossip_tts.data.decode import CORRUPT, KEPT_MEMBERS, MISSING, NONFINITE, TOO_LARGE, Bad, decode_sample, json_info, load_json
from gossip_tts.data.errors import (
    EmptyStreamError, ShardMismatchError, SourceAborted, SourceError, SourceTimeout, empty_stream_message,
)
from gossip_tts.data.limits import DataLimits
from gossip_tts.data.prefetch import Prefetcher
from gossip_tts.data.sample import CodecInfo, LatentSample
from gossip_tts.data.sources import list_shards, open_shard
from gossip_tts.data.tar_stream import TarFormatError, TarMember, TarReader
from gossip_tts.data.tars import SHARD_INFO_NAME, check_info, same_info

log = logging.getLogger(__name__)

# webdataset's rule: the key is the path up to the first dot of the file name.
_MEMBER_RE = re.compile(r"^((?:.*/|)[^./]+)\.([^/]+)$")
_MAX_LOGGED = 10_000
_JOIN_S = 5.0  # a producer cut off by close() ends at once; one stuck in local I/O is left behind (daemon)

SHARD_ERRORS = "shard_errors"
SHARD_TIMEOUTS = "shard_timeouts"
__all__ = ["CORRUPT", "MISSING", "NONFINITE", "SHARD_ERRORS", "SHARD_TIMEOUTS", "TOO_LARGE", "LatentStream", "StreamConfig"]


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
    limits: DataLimits = field(default_factory=DataLimits)
    """Sizes, byte budgets and deadlines that bound what a shard may cost (a shard is untrusted input)."""

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
        if not isinstance(self.limits, DataLimits):
            raise TypeError(f"limits must be a DataLimits, got {type(self.limits).__name__}")


class _Pending:
    """The members of the sample being gathered: kept bodies, or why the sample is refused."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.parts: dict[str, bytes] = {}
        self.kept = 0
        self.bad: Bad | None = None

    def refuse(self, reason: str, detail: str) -> None:
        self.bad = Bad(reason, detail)
        self.parts = {}  # free what was read


class LatentStream:
    """An iterable of LatentSamples (float32 arrays) over shards, read by a background thread.

    Iterating starts a fresh pass from the seed (and stops any pass still running);
    `close()` or leaving the `with` block cuts off any read in progress and joins the thread.
    `stats` counts samples, shards read, shards that failed (`shard_errors`, of which
    `shard_timeouts` ran out of time) and skipped samples by reason; a sample met again on a
    later pass is counted again, logged once. With `interrupt`, a consumer waiting for a
    sample raises StopRequested once the event is set (`Prefetcher`).
    """

    def __init__(self, cfg: StreamConfig, interrupt: threading.Event | None = None) -> None:
        self.cfg = cfg
        self.info: CodecInfo | None = cfg.info
        self.interrupt = interrupt
        self.stats: dict[str, int] = dict.fromkeys(
            ("samples", "shards", SHARD_ERRORS, SHARD_TIMEOUTS, CORRUPT, NONFINITE, MISSING, TOO_LARGE), 0)
        self._logged: set[tuple[str, str, str]] = set()
        self._prefetcher: Prefetcher[LatentSample] | None = None
        self._reads: OpenReads | None = None
        self._lock = threading.Lock()

    @property
    def skipped(self) -> int:
        """Samples skipped so far, whatever the reason."""
        return sum(self.stats[k] for k in (CORRUPT, NONFINITE, MISSING, TOO_LARGE))

    def __enter__(self) -> "LatentStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cut off any read in progress, stop the prefetch thread and wait for it."""
        with self._lock:
            pf, self._prefetcher = self._prefetcher, None
            reads, self._reads = self._reads, None
        if reads is not None:
            reads.abort_all()
        if pf is not None:
            pf.close()

    def __iter__(self) -> Iterator[LatentSample]:
        self.close()
        reads = OpenReads()
        limits = self.cfg.limits
        pf: Prefetcher[LatentSample] = Prefetcher(
            lambda stop: self._produce(stop, reads), self.cfg.prefetch, name="latent-stream", join_timeout_s=_JOIN_S,
            max_bytes=limits.prefetch_bytes, size_of=lambda sample: sample.nbytes, interrupt=self.interrupt,
        )
        with self._lock:
            self._prefetcher, self._reads = pf, reads
        try:
            yield from pf
        finally:
            reads.abort_all()
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

    def _shard_failed(self, shard: str, exc: BaseException) -> None:
        timed_out = isinstance(exc, SourceTimeout)
        self.stats[SHARD_ERRORS] += 1
        if timed_out:
            self.stats[SHARD_TIMEOUTS] += 1
        if isinstance(exc, SourceError):
            detail = str(exc).removeprefix(f"{shard}: ")
        elif isinstance(exc, TarFormatError):
            detail = f"{exc}; the rest of this tar is not read"
        else:
            detail = f"unreadable or truncated tar ({type(exc).__name__}: {exc})"
        self._warn_once(SHARD_TIMEOUTS if timed_out else SHARD_ERRORS, shard, "", detail)

    def _check(self, shard: str, found: CodecInfo, key: str | None = None) -> CodecInfo:
        if self.info is None:
            self.info = found
            log.info("latent space taken from shard %s: %s", shard, found.describe())
        elif not same_info(found, self.info):
            raise ShardMismatchError(shard, found, self.info, key)
        return self.info

    def _list(self, previous: list[str] | None, reads: OpenReads) -> list[str]:
        shards: list[str] = []
        try:
            for src in self.cfg.sources:
                shards.extend(list_shards(src, self.cfg.limits, reads))
        except SourceError as e:
            if previous is None:
                raise
            self._warn_once("relist_failed", ", ".join(self.cfg.sources), "", f"keeping the previous shard list: {e}")
            return previous
        return list(dict.fromkeys(shards))

    def _produce(self, stop: threading.Event, reads: OpenReads) -> Iterator[LatentSample]:
        rng = np.random.default_rng(self.cfg.seed)
        buf: list[LatentSample] = []
        buf_bytes = 0
        cap, cap_bytes = self.cfg.shuffle_buffer, self.cfg.limits.shuffle_buffer_bytes
        shards: list[str] | None = None
        while not stop.is_set():
            shards = self._list(shards, reads)
            order = rng.permutation(len(shards)) if self.cfg.shuffle_shards else np.arange(len(shards))
            got = 0
            for i in order:
                for sample in self._read_shard(shards[int(i)], stop, reads):
                    got += 1
                    if cap <= 1:
                        yield sample
                        continue
                    buf.append(sample)
                    buf_bytes += sample.nbytes
                    while buf and (len(buf) >= cap or buf_bytes > cap_bytes):
                        j = int(rng.integers(len(buf)))
                        buf[j], buf[-1] = buf[-1], buf[j]
                        out = buf.pop()
                        buf_bytes -= out.nbytes
                        yield out
                if stop.is_set():
                    return
            if got == 0 and self.cfg.loop:
                raise EmptyStreamError(empty_stream_message(list(self.cfg.sources), len(shards), dict(self.stats)))
            if not self.cfg.loop:
                break
        rng.shuffle(buf)  # type: ignore[arg-type]
        yield from buf

    def _read_shard(self, shard: str, stop: threading.Event, reads: OpenReads) -> Iterator[LatentSample]:
        try:
            src = open_shard(shard, self.cfg.limits, reads)
        except SourceError as e:
            if not (stop.is_set() or isinstance(e, SourceAborted)):
                self._shard_failed(shard, e)
            return
        pending: _Pending | None = None
        shard_info: CodecInfo | None = None
        with src:
            try:
                tar = TarReader(src, self.cfg.limits.max_header_bytes)
                first = True
                for m in tar:
                    if stop.is_set():
                        return
                    if first and m.name == SHARD_INFO_NAME:
                        first = False
                        shard_info = self._shard_header(shard, tar, m)
                        continue
                    first = False
                    match = _MEMBER_RE.match(m.name) if m.is_file else None
                    if match is None:
                        continue
                    key, ext = match.group(1), match.group(2)
                    if pending is None or key != pending.key:
                        if pending is not None:
                            yield from self._finish(shard, pending, shard_info, src)
                        pending = _Pending(key)
                    if pending.bad is None and ext in KEPT_MEMBERS:
                        self._gather(pending, ext, m, tar)
                if pending is not None:
                    done, pending = pending, None
                    yield from self._finish(shard, done, shard_info, src)
                self.stats["shards"] += 1
            except (TarFormatError, EOFError, OSError) as e:  # SourceError is an OSError
                if stop.is_set() or isinstance(e, SourceAborted):  # closing: not the shard's fault
                    return
                self._shard_failed(shard, e)
                if pending is not None and pending.bad is None and all(x in pending.parts for x in KEPT_MEMBERS):
                    yield from self._finish(shard, pending, shard_info, src)
                elif pending is not None:
                    bad = pending.bad or Bad(CORRUPT, "sample cut off where the shard failed")
                    self._skip(bad.reason, shard, pending.key, str(bad))

    def _gather(self, pending: _Pending, ext: str, m: TarMember, tar: TarReader) -> None:
        """Read one member a sample is made of, unless a limit refuses it (then nothing more of the key is read)."""
        limits = self.cfg.limits
        total = pending.kept + m.size
        if ext in pending.parts:
            pending.refuse(CORRUPT, f"member {m.name} appears twice")
        elif ext == "json" and m.size > limits.max_json_bytes:
            pending.refuse(TOO_LARGE, f"member {m.name} is {m.size} bytes, over the max_json_bytes limit of {limits.max_json_bytes}")
        elif total > limits.max_sample_bytes:
            pending.refuse(TOO_LARGE, f"with member {m.name} ({m.size} bytes) the sample holds {total} bytes, "
                                      f"over the max_sample_bytes limit of {limits.max_sample_bytes}; skipped unread")
        else:
            pending.parts[ext] = tar.read()
            pending.kept = total

    def _shard_header(self, shard: str, tar: TarReader, m: TarMember) -> CodecInfo | None:
        """Checks the shard's recorded latent space before any sample is read."""
        if m.size > self.cfg.limits.max_json_bytes:
            self._warn_once("bad_shard_header", shard, SHARD_INFO_NAME, f"ignoring a shard header of {m.size} bytes "
                            f"(over the max_json_bytes limit of {self.cfg.limits.max_json_bytes})")
            return None
        try:
            head = load_json(tar.read(), "shard header")
            found = json_info(head if isinstance(head, dict) else {})
        except Bad as e:
            self._warn_once("bad_shard_header", shard, SHARD_INFO_NAME, f"ignoring an unreadable shard header: {e}")
            return None
        return self._check(shard, found) if found is not None else None

    def _finish(self, shard: str, pending: _Pending, shard_info: CodecInfo | None, src: BoundedReader) -> Iterator[LatentSample]:
        try:
            if pending.bad is not None:
                raise pending.bad
            sample = decode_sample(pending.key, pending.parts, shard_info, lambda found: self._check(shard, found, pending.key))
        except Bad as e:
            self._skip(e.reason, shard, pending.key, str(e))
            return
        self.stats["samples"] += 1
        src.watchdog.pause()  # time the consumer takes is not the source's
        try:
            yield sample
        finally:
            src.watchdog.resume()
