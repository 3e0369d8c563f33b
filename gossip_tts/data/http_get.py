"""GET over http(s) as a BoundedReader: the socket stays in reach, so a deadline or a stop can cut it.

http.client is used directly (not urllib) because the reader needs the connection's socket
to shut it down from another thread; urllib hides it. Only http and https are spoken, on
the first request and on every redirect (no file:// or ftp:// reached through a listing or
a redirect), and the watchdog's deadline covers connecting, the headers and the body alike:
a server that trickles its headers is cut off as surely as one that trickles its body.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.parse

from gossip_tts.data.bounded_read import BoundedReader, OpenReads, Watchdog
from gossip_tts.data.errors import SourceError, SourceTimeout

MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_HEADERS = {"User-Agent": "gossip-tts", "Accept-Encoding": "identity"}


def is_http(source: str) -> bool:
    return urllib.parse.urlsplit(source).scheme.lower() in ("http", "https")


def _connection(url: str, stall_s: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise SourceError(f"cannot fetch {url}: only http(s) URLs with a host are read")
    try:
        port = parts.port
    except ValueError as e:
        raise SourceError(f"cannot fetch {url}: {e}") from None
    if parts.scheme.lower() == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, port, timeout=stall_s, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, port, timeout=stall_s)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return conn, target


def http_get(url: str, stall_s: float, deadline_s: float, reads: OpenReads | None = None) -> BoundedReader:
    """The body of a 200 answer to GET `url`, following up to MAX_REDIRECTS redirects.

    Raises SourceError (with `status` for an HTTP error answer), SourceTimeout, or
    SourceAborted when `reads` is aborted meanwhile."""
    watchdog = Watchdog(url, deadline_s, stall_s, reads)
    try:
        for _ in range(MAX_REDIRECTS + 1):
            conn, target = _connection(url, stall_s)
            watchdog.check()
            try:
                conn.connect()
                watchdog.watch(conn.sock)
                conn.request("GET", target, headers=_HEADERS)
                resp = conn.getresponse()
            except (socket.timeout, TimeoutError) as e:
                conn.close()
                watchdog.check()
                raise SourceTimeout(f"cannot reach {url}: timed out after {stall_s:g} s") from e
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                watchdog.check()
                raise SourceError(f"cannot reach {url}: {type(e).__name__}: {e}") from e
            if resp.status == 200:
                return BoundedReader(resp, watchdog)
            location = resp.getheader("Location")
            resp.close()
            conn.close()
            if resp.status not in _REDIRECTS or not location:
                raise SourceError(f"cannot fetch {url}: HTTP {resp.status} {resp.reason}", status=resp.status)
            url = urllib.parse.urljoin(url, location)
            if not is_http(url):
                raise SourceError(f"refusing a redirect to {url}: only http(s) is followed")
        raise SourceError(f"cannot fetch {url}: more than {MAX_REDIRECTS} redirects")
    except BaseException:
        watchdog.close()
        raise
