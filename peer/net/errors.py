"""Why a socket operation failed, in words a user can act on.

aiohttp's own text for a refused connection ("Cannot connect to host … ssl:default [Connect
call failed …]") and asyncio's for a taken port ("[Errno 98] error while attempting to bind")
name neither the cause nor the fix; the log, the join message and the CLI name these.
"""

from __future__ import annotations

import asyncio
import errno
import socket

import aiohttp

_BY_ERRNO = {
    errno.ECONNREFUSED: "connection refused (nothing listens on that port)",
    errno.EHOSTUNREACH: "host unreachable (check the address and the network)",
    errno.ENETUNREACH: "network unreachable (check the address and the network)",
    errno.ETIMEDOUT: "connection timed out (a firewall may drop it)",
    errno.ECONNRESET: "connection reset by the other side",
}


def describe_os_error(exc: BaseException) -> str | None:
    """The reason for a failed connect (refused, unreachable, timed out, unknown host), or None."""
    if isinstance(exc, socket.gaierror):
        return "cannot resolve the host name (check its spelling)"
    return _BY_ERRNO.get(exc.errno or 0) if isinstance(exc, OSError) else None


def describe_failure(exc: BaseException) -> str:
    """One short phrase for a failed dial: the reason first, aiohttp's detail only as a fallback."""
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "cannot resolve the host name (check its spelling)"
    if isinstance(exc, aiohttp.ClientConnectorError):
        reason = describe_os_error(exc.os_error)
        if reason:
            return reason
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer in time (a firewall may drop it, or the peer is overloaded)"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the other side closed the connection (is it a gossip-tts peer?)"
    return describe_os_error(exc) or str(exc) or type(exc).__name__


_BY_STATUS = {
    429: "busy: it answers only so many requests from one address at a time (asked again later)",
    503: "busy: its node worker has too much queued, or it is still joining (asked again later)",
    403: "refused us (a private swarm whose --trusted-keys do not name us?)",
    404: "has no such endpoint (is it a gossip-tts peer of this version?)",
}


def describe_status(status: int) -> str:
    """One short phrase for a peer's HTTP answer other than 200: what it meant, not only its number."""
    return f"HTTP {status}, " + _BY_STATUS[status] if status in _BY_STATUS else f"HTTP {status}"


DEFAULT_BUSY_S = 1.0
"""How long a partner that answered 429 rests when its `Retry-After` is absent or unreadable."""
MAX_BUSY_S = 60.0
"""The longest a partner's `Retry-After` rests it: a larger one (a stranger's header is any text)
is cut to this, so no answer benches a partner of ours for longer."""


def busy_for(status: int, retry_after: str | None) -> float | None:
    """Seconds to leave a peer alone after its answer `status` (None: not a 429, nothing to wait):
    its `Retry-After` in whole seconds (RFC 9110; the date form is not used between peers), else
    `DEFAULT_BUSY_S`, within [0, `MAX_BUSY_S`]."""
    if status != 429:
        return None
    text = (retry_after or "").strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 6):
        return DEFAULT_BUSY_S
    return min(MAX_BUSY_S, float(int(text)))


class ListenError(OSError):
    """The peer cannot serve on its --listen address; the message names the flag to change."""


def listen_failure(listen: str, exc: OSError) -> ListenError:
    """The one-line error for a --listen address that cannot be bound."""
    if exc.errno == errno.EADDRINUSE:
        why = "the port is in use (another peer or program holds it)"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = "no interface of this machine has that address"
    elif exc.errno == errno.EACCES:
        why = "permission denied (ports below 1024 need root)"
    else:
        why = exc.strerror or str(exc)
    return ListenError(f"cannot listen on --listen {listen}: {why}; pick another port, or port 0 for a free one")
