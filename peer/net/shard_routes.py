"""Serving corpus shards by content hash: `GET /v1/shards` and `GET /v1/shards/HASH`.

`GET /v1/shards` says which manifest this peer holds and which of its shards (a bitmap over
the manifest's order, `peer.shards.advert`).
`GET /v1/shards/HASH` streams one shard (or the manifest or its signed document, by their own
hash) from disk by sendfile, or where a transport cannot, in CHUNK-sized reads: memory stays
bounded whatever the shard's size, and all uploads together keep under `max_upload_mb_s`
(`peer.shards.pacer`), so serving leaves the training step its CPU; a single `Range:
bytes=A-B` (or `A-`, `-N`) answers 206, which lets a fetcher resume a transfer cut off at
another peer. Limits beside the RequestGuard's per-address ones (an IPv6 /64 is one address:
`peer.net.http_guard.remote_key`): at most `max_uploads_per_address` uploads to one address
(429), one per address once half the slots are in use (429, `peer.shards.plan.upload_refusal`),
and `max_uploads` in all (503). An IPv6 block (`NetConfig.ipv6_block_prefix`, a /48) holds what
`ipv6_block_share` addresses may (429, `block_upload_refusal`): its 65,536 /64s otherwise took
every slot, one each. A reader that stops, or reads slower than `min_upload_kb_s`, is
cut off when a piece is not taken within `upload_stall_s` (`shard_upload_stalled`), and any
upload that outlasts `upload_deadline_s` (`slow_shard_reader`), so a slow reader holds a slot no
longer. Refusals are counted in `http_refused_total{reason=...}`.

`add_shard_routes(app, server, blocks=...)` adds the routes; they serve the `ShardServer` of the
peer's corpus service (`peer.runtime.CorpusService`, handed to `peer.startup.build_peer`), and
answer 404 when there is none.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from pathlib import Path
from typing import BinaryIO

from aiohttp import web

from peer.core.budget_key import NO_BLOCKS, Blocks
from peer.net.http_guard import count_down, remote_key
from peer.metrics import Metrics
from peer.shards.advert import SignedOffer, advert_body
from peer.shards.config import SwarmDataConfig
from peer.shards.pacer import UploadPacer
from peer.shards.plan import upload_piece_bytes, upload_refusal
from peer.shards.store import ShardStore

SENDFILE = True
"""Send shards with sendfile where the transport allows (False: always read and write them)."""
SEND_PIECE = 1 << 20
"""Bytes per sendfile call: the pacer, the deadline and the byte counter see the upload at this grain."""
CHUNK = 256 * 1024
"""Bytes read from disk and written per step of an upload without sendfile."""
_DIGEST_RE = re.compile(r"[0-9a-f]{64}")
_RANGE_RE = re.compile(r"bytes=([0-9]*)-([0-9]*)")
MAX_RANGE_DIGITS = 20
"""Longer numbers in a Range are past any file's size (and past int()'s limit at 4,300 digits)."""


class RangeNotSatisfiable(ValueError):
    pass


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The byte span [start, end) one `Range` header asks for, or None for the whole file.

    One range only (several, or another unit, are answered with the whole file, as RFC 9110
    allows); a range past the end, or with numbers of over MAX_RANGE_DIGITS digits, raises
    RangeNotSatisfiable (416)."""
    if not header:
        return None
    m = _RANGE_RE.fullmatch(header.strip())
    if m is None or (not m.group(1) and not m.group(2)):
        return None
    first, last = m.group(1), m.group(2)
    if max(len(first), len(last)) > MAX_RANGE_DIGITS:
        raise RangeNotSatisfiable(f"range numbers of over {MAX_RANGE_DIGITS} digits for a {size}-byte file")
    if not first:  # a suffix: the last N bytes
        n = int(last)
        if n == 0:
            raise RangeNotSatisfiable(f"empty suffix range of a {size}-byte file")
        return max(0, size - n), size
    start = int(first)
    end = min(size, int(last) + 1) if last else size
    if start >= size or end <= start:
        raise RangeNotSatisfiable(f"range {header!r} is outside the {size}-byte file")
    return start, end


def block_upload_refusal(open_to_block: int, open_total: int, per_address: int, total: int,
                         share: int) -> tuple[int, str] | None:
    """(429, reason) where an IPv6 block already holds what `share` addresses may (`upload_refusal`'s
    per-address caps: `per_address` each, one each once half of the `total` are in use)."""
    cap = share * (1 if open_total >= total // 2 else per_address)
    return (429, "shard_uploads_block") if open_to_block >= cap else None


class _Stalled(Exception):
    """The reader took no piece within `upload_stall_s` (stopped, or below `min_upload_kb_s`)."""


class ShardServer:
    """Uploads of one store's shards, with their limits and counters."""

    def __init__(self, store: ShardStore, cfg: SwarmDataConfig, metrics: Metrics) -> None:
        self.store, self.cfg, self.metrics = store, cfg, metrics
        self._open: dict[str, int] = {}
        """Uploads open per address, and per IPv6 block; one with none has no entry (refusals add none)."""
        self.uploads = 0
        self._sendfile = SENDFILE
        rate = cfg.max_upload_mb_s * 1e6
        self.pacer = UploadPacer(rate, max(rate / 4, SEND_PIECE), time.monotonic()) if rate > 0 else None

    def _refuse(self, status: int, reason: str, text: str) -> web.Response:
        self.metrics.inc("http_refused_total", reason=reason)
        return web.json_response({"refused": reason, "detail": text[:200]}, status=status)

    async def list_shards(self, request: web.Request) -> web.Response:
        manifest, signed = self.store.manifest, self.store.signed
        offer = None if signed is None else SignedOffer(signed.hash, signed.signer, signed.version)
        return web.json_response(advert_body(manifest.hash, [s.sha256 for s in manifest.shards], self.store.held(), offer))

    async def serve(self, request: web.Request, blocks: Blocks = NO_BLOCKS) -> web.StreamResponse:
        """GET /v1/shards/HASH. `blocks`: the IPv6 blocks whose /64s share upload slots (`NetConfig.blocks`,
        bound by `add_shard_routes`: the corpus service that makes this server reads no network settings)."""
        digest = request.match_info["digest"]
        if not _DIGEST_RE.fullmatch(digest):
            return self._refuse(400, "bad_shard_hash", "a shard is named by its SHA-256: 64 lowercase hex digits")
        path = self.store.path_of(digest)
        if path is None:
            return web.json_response({"missing": digest}, status=404)
        remote = remote_key(request)
        block = blocks.of(remote)
        cfg = self.cfg
        refusal = upload_refusal(self._open.get(remote, 0), self.uploads, cfg.max_uploads_per_address, cfg.max_uploads)
        if refusal is None and block is not None:
            refusal = block_upload_refusal(self._open.get(block, 0), self.uploads, cfg.max_uploads_per_address,
                                           cfg.max_uploads, blocks.share)
        if refusal is not None:
            status, reason = refusal
            text = {"shard_uploads": f"at most {cfg.max_uploads_per_address} shard uploads per address",
                    "shard_uploads_shared": "one shard upload per address while half the slots are in use",
                    "shard_uploads_block": f"at most {blocks.share} addresses' shard uploads per IPv6 /{blocks.prefix}",
                    }.get(reason, f"{cfg.max_uploads} shard uploads under way; try another peer")
            return self._refuse(status, reason, text)
        opened = [remote] + ([block] if block is not None else [])  # a /64 and a block never share a key
        for key in opened:
            self._open[key] = self._open.get(key, 0) + 1
        self.uploads += 1
        try:
            with self.store.using(digest):
                return await self._send(request, path, digest)
        finally:
            self.uploads -= 1
            for key in opened:
                count_down(self._open, key)

    async def _send(self, request: web.Request, path: Path, digest: str) -> web.StreamResponse:
        try:
            f = open(path, "rb")
        except OSError:  # evicted between the lookup and now
            return web.json_response({"missing": digest}, status=404)
        with f:
            size = _size(f)
            try:
                span = parse_range(request.headers.get("Range"), size)
            except RangeNotSatisfiable as exc:
                return web.json_response({"refused": "range", "detail": str(exc)}, status=416,
                                         headers={"Content-Range": f"bytes */{size}"})
            start, end = span or (0, size)
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(end - start),
                       "Accept-Ranges": "bytes"}
            if span is not None:
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
            response = web.StreamResponse(status=206 if span is not None else 200, headers=headers)
            await response.prepare(request)
            if request.method == "HEAD":  # the headers only: a body would corrupt the kept-alive connection
                await response.write_eof()
                return response
            try:
                await asyncio.wait_for(self._copy(f, start, end, request, response), self.cfg.upload_deadline_s)
            except (asyncio.TimeoutError, ConnectionError, _Stalled) as exc:
                if not isinstance(exc, ConnectionError):
                    reason = "shard_upload_stalled" if isinstance(exc, _Stalled) else "slow_shard_reader"
                    self.metrics.inc("http_refused_total", reason=reason)
                if request.transport is not None:
                    request.transport.abort()
                return response
            await response.write_eof()
        if not self.store.is_manifest(digest) and end == size:
            self.metrics.inc("shards_served_total")
        return response

    async def _copy(self, f: BinaryIO, start: int, end: int, request: web.Request, response: web.StreamResponse) -> None:
        """Send bytes [start, end) of `f`, a piece at a time: by sendfile (the kernel copies from the page
        cache to the socket; no byte passes through Python) where the transport allows, else read and
        written in CHUNK-sized pieces. Either way memory stays bounded and the pacer is asked first.
        _Stalled when the reader does not take a piece within `upload_stall_s`."""
        loop = asyncio.get_running_loop()
        offset, stall_s = start, self.cfg.upload_stall_s
        while offset < end:
            piece = upload_piece_bytes(SEND_PIECE if self._sendfile else CHUNK, stall_s, self.cfg.min_upload_kb_s * 1e3)
            n = min(piece, end - offset)
            if self.pacer is not None and (wait := self.pacer.delay(n, time.monotonic())) > 0:
                await asyncio.sleep(wait)  # our own pace: not the reader's time
            try:
                sent = await asyncio.wait_for(self._send_piece(loop, f, offset, n, request, response), stall_s)
            except asyncio.TimeoutError:
                raise _Stalled(f"a piece of {n} bytes not taken within {stall_s:g} s") from None
            if not sent:  # the file shrank under us: the asker sees a short body and resumes elsewhere
                raise ConnectionResetError("shard file shorter than its size")
            offset += sent
            self.metrics.inc("data_bytes_sent_total", sent)

    async def _send_piece(self, loop: asyncio.AbstractEventLoop, f: BinaryIO, offset: int, n: int,
                          request: web.Request, response: web.StreamResponse) -> int:
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("the asker went away")
        if self._sendfile:
            try:
                return await loop.sendfile(transport, f, offset, n, fallback=False)
            except (NotImplementedError, asyncio.SendfileNotAvailableError):  # TLS, or no os.sendfile: copy instead
                self._sendfile = False
        f.seek(offset)
        chunk = await loop.run_in_executor(None, f.read, n)
        if chunk:
            await response.write(chunk)
        return len(chunk)


def _size(f: BinaryIO) -> int:
    f.seek(0, 2)
    return f.tell()


async def _no_shards(request: web.Request) -> web.Response:
    return web.json_response({"missing": "this peer shares no corpus"}, status=404)


def add_shard_routes(app: web.Application, server: ShardServer | None, *, blocks: Blocks) -> None:
    """Add GET /v1/shards and GET /v1/shards/{digest}, served by `server` (None: this peer shares
    no corpus, and both answer 404) with `blocks` sharing upload slots (`NetConfig.blocks`)."""
    if server is None:
        app.router.add_get("/v1/shards", _no_shards)
        app.router.add_get("/v1/shards/{digest}", _no_shards)
        return
    app.router.add_get("/v1/shards", server.list_shards)
    app.router.add_get("/v1/shards/{digest}", functools.partial(server.serve, blocks=blocks))
