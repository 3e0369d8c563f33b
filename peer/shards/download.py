"""Blocking HTTP reads of content by hash from one peer: a shard (resumable), a manifest, an advert.

Run on the fetcher's threads, never on the event loop or the training thread. Every read is
capped: a shard at the manifest's size (a source that offers or sends more is refused as
`too_long`), a manifest at MAX_MANIFEST_BYTES, an advert at MAX_ADVERT_BYTES. A socket that
is silent for `stall_s` fails the read; a deadline (and for shards `stop`) is checked
between reads, so a server trickling bytes cannot hold a reader for good. Nothing here judges the bytes: the fetcher hashes them.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

from peer.core.addresses import parse_address
from peer.shards.advert import parse_advert
from peer.shards.manifest import load_json

CHUNK = 256 * 1024
MAX_ADVERT_BYTES = 1 << 20
"""A /v1/shards answer: the bitmap of 65,536 shards is 16 kB."""
ADVERT_DEADLINE_S = 30.0
_CONTENT_RANGE_RE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class SourceFailed(Exception):
    """This source did not deliver (unreachable, silent, an error answer, cut short): try another."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class SourceLied(SourceFailed):
    """This source offered or sent what the manifest rules out (more bytes than the shard has, a
    range we did not ask for): refused and penalised like bytes that fail the hash."""


def _connect(address: str, stall_s: float) -> http.client.HTTPConnection:
    try:
        host, port = parse_address(address)
    except ValueError as exc:
        raise SourceFailed("bad_address", str(exc)) from None
    return http.client.HTTPConnection(host, port, timeout=stall_s)


def _get(conn: http.client.HTTPConnection, path: str, headers: dict[str, str]) -> http.client.HTTPResponse:
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "identity", **headers})
        return conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        raise SourceFailed("unreachable", f"{type(exc).__name__}: {exc}") from None


def get_capped(address: str, path: str, cap: int, stall_s: float, deadline_s: float = 60.0) -> bytes:
    """The body of a 200 answer to GET `path`, refused unread past `cap` bytes, given up after
    `deadline_s` (a server that trickles a byte just within `stall_s` holds us no longer)."""
    deadline = time.monotonic() + deadline_s
    conn = _connect(address, stall_s)
    try:
        resp = _get(conn, path, {})
        if resp.status != 200:
            raise SourceFailed(f"http_{resp.status}", f"GET {path} from {address}")
        declared = resp.getheader("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise SourceLied("too_long", f"{address} offers {declared} bytes for {path}, over {cap}")
        data = bytearray()
        while chunk := resp.read1(min(CHUNK, cap + 1 - len(data))):
            data += chunk
            if len(data) > cap:
                raise SourceLied("too_long", f"{address} sent over {cap} bytes for {path}")
            if time.monotonic() > deadline:
                raise SourceFailed("deadline", f"{address} took over {deadline_s:g} s to send {path}")
        return bytes(data)
    except (OSError, http.client.HTTPException) as exc:
        raise SourceFailed("cut_off", f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def read_advert_doc(address: str, stall_s: float) -> Any:
    """The parsed JSON of `address`'s GET /v1/shards (`peer.shards.advert`), read capped."""
    try:
        return load_json(get_capped(address, "/v1/shards", MAX_ADVERT_BYTES, stall_s, ADVERT_DEADLINE_S))
    except ValueError as exc:  # ManifestError too: not JSON, NaN, or nested past the parser's depth
        raise SourceFailed("bad_advert", f"{address}: /v1/shards: {exc}") from None


def read_advert(address: str, manifest_hash: str, order: list[str], stall_s: float) -> set[str]:
    """The shards of our manifest (`order`: its shard hashes in manifest order) that `address` says
    it holds; empty if it holds another manifest."""
    try:
        return parse_advert(read_advert_doc(address, stall_s), manifest_hash, order)
    except ValueError as exc:
        raise SourceFailed("bad_advert", f"{address}: /v1/shards: {exc}") from None


def fetch_range(address: str, digest: str, part: Path, size: int, stall_s: float, deadline: float,
                stop: threading.Event, on_bytes: Callable[[int], None]) -> None:
    """Append to `part` the bytes of shard `digest` it lacks, from `address`, resuming at its length.

    Returns once `part` holds `size` bytes; raises SourceFailed (try another source: the part
    keeps what came) or SourceLied. `on_bytes(n)` is told of every chunk written."""
    have = part.stat().st_size if part.exists() else 0
    if have == size:
        return
    if have > size:
        part.unlink()
        have = 0
    conn = _connect(address, stall_s)
    try:
        resp = _get(conn, f"/v1/shards/{digest}", {"Range": f"bytes={have}-"} if have else {})
        if resp.status == 206:
            m = _CONTENT_RANGE_RE.fullmatch(resp.getheader("Content-Range") or "")
            if m is None or int(m.group(1)) != have or int(m.group(3)) != size:
                raise SourceLied("bad_range", f"{address} answered Range bytes={have}- with "
                                              f"{resp.getheader('Content-Range')!r} for a {size}-byte shard")
        elif resp.status == 200:
            have = 0  # the whole shard again: start over
        else:
            raise SourceFailed(f"http_{resp.status}", f"{address} answered {resp.status} for shard {digest[:16]}")
        declared = resp.getheader("Content-Length")
        if declared is not None and declared.isdigit() and have + int(declared) > size:
            raise SourceLied("too_long", f"{address} offers {have + int(declared)} bytes of a {size}-byte shard")
        with open(part, "r+b" if have else "wb") as f:
            f.seek(have)
            f.truncate()
            while have < size:
                if stop.is_set():
                    raise SourceFailed("stopped", "the fetcher is stopping")
                if time.monotonic() > deadline:
                    raise SourceFailed("deadline", f"shard {digest[:16]} not fetched in time")
                chunk = resp.read1(min(CHUNK, size - have))
                if not chunk:
                    raise SourceFailed("cut_off", f"{address} ended shard {digest[:16]} at byte {have} of {size}")
                f.write(chunk)
                have += len(chunk)
                on_bytes(len(chunk))
        if resp.read1(1):
            raise SourceLied("too_long", f"{address} sent more than the {size} bytes of shard {digest[:16]}")
    except (socket.timeout, TimeoutError) as exc:
        raise SourceFailed("stalled", f"{address} silent for {stall_s:g} s: {exc}") from None
    except (OSError, http.client.HTTPException) as exc:
        raise SourceFailed("cut_off", f"{address}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
