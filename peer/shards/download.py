"""Blocking HTTP reads of content by hash from one peer: a shard (resumable), a manifest, an advert.

Run on the fetcher's threads, never on the event loop or the training thread. Every read is
capped: a shard at the manifest's size (a source that offers or sends more is refused as
`too_long`), a manifest at MAX_MANIFEST_BYTES, an advert at MAX_ADVERT_BYTES. A socket that
is silent for `stall_s` fails the read. The deadline covers the whole request (connecting,
the status line and headers, the body) and for shards so does `stop`: a `Watchdog`
(`peer/shards/socket_watchdog.py`) shuts the socket down when either comes, so a server
trickling a byte just within `stall_s`, headers included, cannot hold a reader for good.
A Content-Length or Content-Range that is not a plain ASCII number is refused as a lie.
Nothing here judges the bytes: the fetcher hashes them.
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
from peer.shards.socket_watchdog import ReadAborted, ReadDeadline, Watchdog

CHUNK = 256 * 1024
MAX_ADVERT_BYTES = 1 << 20
"""A /v1/shards answer: the bitmap of 65,536 shards is 16 kB."""
ADVERT_DEADLINE_S = 30.0
_LENGTH_RE = re.compile(r"[0-9]{1,20}")
_CONTENT_RANGE_RE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20})")


class SourceFailed(Exception):
    """This source did not deliver (unreachable, silent, an error answer, cut short): try another."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class SourceLied(SourceFailed):
    """This source offered or sent what the manifest rules out (more bytes than the shard has, a
    range we did not ask for, a malformed length): refused and penalised like bytes that fail the hash."""


class _Request:
    """One GET to one source, bounded as a whole by `deadline_s` and, if given, cut by `stop`.

    Every failure leaves as SourceFailed: a cut as `deadline` or `stopped`, whatever the socket
    said when it was shut down under the reader."""

    def __init__(self, address: str, path: str, stall_s: float, deadline_s: float,
                 stop: threading.Event | None = None) -> None:
        self.address, self.path, self.stall_s, self.deadline_s = address, path, stall_s, deadline_s
        try:
            host, port = parse_address(address)
        except ValueError as exc:
            raise SourceFailed("bad_address", str(exc)) from None
        self.conn = http.client.HTTPConnection(host, port, timeout=stall_s)
        self.watchdog = Watchdog(f"{address} {path}", deadline_s, stall_s, stop=stop)

    def __enter__(self) -> "_Request":
        return self

    def __exit__(self, *exc: object) -> None:
        self.watchdog.close()
        self.conn.close()

    def check(self) -> None:
        """Raise SourceFailed if the request was cut (or its time is up, or `stop` is set)."""
        try:
            self.watchdog.check()
        except ReadAborted:
            raise SourceFailed("stopped", "the fetcher is stopping") from None
        except ReadDeadline:
            raise SourceFailed("deadline", f"{self.address} took over {self.deadline_s:g} s "
                                           f"to answer {self.path}") from None

    def get(self, headers: dict[str, str]) -> http.client.HTTPResponse:
        """Connect, send the request and read the status line and headers, all under the deadline."""
        self.check()
        try:
            self.conn.timeout = max(0.001, min(self.stall_s, self.deadline_s - self.watchdog.elapsed()))
            self.conn.connect()
            assert self.conn.sock is not None
            self.conn.sock.settimeout(self.stall_s)
            self.watchdog.watch(self.conn.sock)
            self.conn.request("GET", self.path, headers={"Accept-Encoding": "identity", **headers})
            return self.conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            self.check()
            raise SourceFailed("unreachable", f"{type(exc).__name__}: {exc}") from None

    def read1(self, resp: http.client.HTTPResponse, n: int) -> bytes:
        """Up to n bytes of the body (b"" at its end); a cut raises rather than looking like the end."""
        chunk = resp.read1(n)
        self.check()
        return chunk

    def failed(self, exc: BaseException) -> SourceFailed:
        """What a socket or protocol error in the body means: the cut if there was one, else a
        stall (silent for `stall_s`) or a source that broke off."""
        self.check()
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return SourceFailed("stalled", f"{self.address} silent for {self.stall_s:g} s: {exc}")
        return SourceFailed("cut_off", f"{self.address}: {type(exc).__name__}: {exc}")


def _declared_length(resp: http.client.HTTPResponse, address: str) -> int | None:
    """The Content-Length, if any; one that is not a plain ASCII number is a lie (SourceLied)."""
    declared = resp.getheader("Content-Length")
    if declared is None:
        return None
    if not _LENGTH_RE.fullmatch(declared):
        raise SourceLied("bad_length", f"{address} sent Content-Length {declared[:40]!r}")
    return int(declared)


def get_capped(address: str, path: str, cap: int, stall_s: float, deadline_s: float = 60.0,
               stop: threading.Event | None = None) -> bytes:
    """The body of a 200 answer to GET `path`, refused unread past `cap` bytes, given up after
    `deadline_s` from the start of the request (a server that trickles its headers or body a
    byte just within `stall_s` holds us no longer), or once `stop` is set."""
    with _Request(address, path, stall_s, deadline_s, stop) as req:
        resp = req.get({})
        try:
            if resp.status != 200:
                raise SourceFailed(f"http_{resp.status}", f"GET {path} from {address}")
            declared = _declared_length(resp, address)
            if declared is not None and declared > cap:
                raise SourceLied("too_long", f"{address} offers {declared} bytes for {path}, over {cap}")
            data = bytearray()
            while chunk := req.read1(resp, min(CHUNK, cap + 1 - len(data))):
                data += chunk
                if len(data) > cap:
                    raise SourceLied("too_long", f"{address} sent over {cap} bytes for {path}")
            return bytes(data)
        except (OSError, http.client.HTTPException) as exc:
            raise req.failed(exc) from None


def read_advert_doc(address: str, stall_s: float, stop: threading.Event | None = None) -> Any:
    """The parsed JSON of `address`'s GET /v1/shards (`peer.shards.advert`), read capped."""
    try:
        return load_json(get_capped(address, "/v1/shards", MAX_ADVERT_BYTES, stall_s, ADVERT_DEADLINE_S, stop))
    except ValueError as exc:  # ManifestError too: not JSON, NaN, or nested past the parser's depth
        raise SourceFailed("bad_advert", f"{address}: /v1/shards: {exc}") from None


def read_advert(address: str, manifest_hash: str, order: list[str], stall_s: float,
                stop: threading.Event | None = None) -> set[str]:
    """The shards of our manifest (`order`: its shard hashes in manifest order) that `address` says
    it holds; empty if it holds another manifest. `stop` cuts the read short."""
    try:
        return parse_advert(read_advert_doc(address, stall_s, stop), manifest_hash, order)
    except ValueError as exc:
        raise SourceFailed("bad_advert", f"{address}: /v1/shards: {exc}") from None


def fetch_range(address: str, digest: str, part: Path, size: int, stall_s: float, deadline: float,
                stop: threading.Event, on_bytes: Callable[[int], None]) -> None:
    """Append to `part` the bytes of shard `digest` it lacks, from `address`, resuming at its length.

    Returns once `part` holds `size` bytes; raises SourceFailed (try another source: the part
    keeps what came) or SourceLied. `deadline` (a time.monotonic() value) bounds the whole
    request, headers included, and `stop` cuts it. `on_bytes(n)` is told of every chunk written."""
    have = part.stat().st_size if part.exists() else 0
    if have == size:
        return
    if have > size:
        part.unlink()
        have = 0
    left_s = deadline - time.monotonic()
    if left_s <= 0:
        raise SourceFailed("deadline", f"shard {digest[:16]} not fetched in time")
    with _Request(address, f"/v1/shards/{digest}", stall_s, left_s, stop) as req:
        resp = req.get({"Range": f"bytes={have}-"} if have else {})
        try:
            have = _check_answer(resp, address, digest, have, size)
            _append(req, resp, part, have, size, on_bytes)
            if req.read1(resp, 1):
                raise SourceLied("too_long", f"{address} sent more than the {size} bytes of shard {digest[:16]}")
        except (OSError, http.client.HTTPException) as exc:
            raise req.failed(exc) from None


def _check_answer(resp: http.client.HTTPResponse, address: str, digest: str, have: int, size: int) -> int:
    """Where the answer's body starts in the shard (`have`, or 0 for the whole shard again);
    SourceLied for a range or a length the shard rules out, SourceFailed for an error answer."""
    if resp.status == 206:
        header = resp.getheader("Content-Range") or ""
        m = _CONTENT_RANGE_RE.fullmatch(header)
        if m is None or int(m.group(1)) != have or int(m.group(3)) != size:
            raise SourceLied("bad_range", f"{address} answered Range bytes={have}- with "
                                          f"{header[:80]!r} for a {size}-byte shard")
    elif resp.status == 200:
        have = 0  # the whole shard again: start over
    else:
        raise SourceFailed(f"http_{resp.status}", f"{address} answered {resp.status} for shard {digest[:16]}")
    declared = _declared_length(resp, address)
    if declared is not None and have + declared > size:
        raise SourceLied("too_long", f"{address} offers {have + declared} bytes of a {size}-byte shard")
    return have


def _append(req: _Request, resp: http.client.HTTPResponse, part: Path, have: int, size: int,
            on_bytes: Callable[[int], None]) -> None:
    """Write the body into `part` from byte `have` until it holds `size` bytes."""
    with open(part, "r+b" if have else "wb") as f:
        f.seek(have)
        f.truncate()
        while have < size:
            chunk = req.read1(resp, min(CHUNK, size - have))
            if not chunk:
                raise SourceFailed("cut_off", f"{req.address} ended {req.path} at byte {have} of {size}")
            f.write(chunk)
            have += len(chunk)
            on_bytes(len(chunk))
