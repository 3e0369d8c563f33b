"""GET /v1/state, resumed where a broken transfer stopped (`peer.net.state_resume` says how the
answer names its frame and which bytes a resume gets)."""

from __future__ import annotations

import asyncio
from typing import Callable

import aiohttp

from peer.net.errors import describe_status
from peer.net.http_io import BodyTooLarge
from peer.net.state_resume import resumed_total

__all__ = ["fetch_state"]

RESUMABLE = (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionError,
             asyncio.TimeoutError, OSError)
"""Failures of a transfer under way that a resume can recover: the connection or its deadline,
never an answer's content."""
MAX_WAIT_S = 30.0
"""The longest a resume waits when the peer says it is too soon (429 with `Retry-After`)."""


def _retry_after(header: str | None) -> float:
    """Seconds a `Retry-After` of whole seconds asks for, within [0, MAX_WAIT_S] (1 if unreadable)."""
    try:
        seconds = float(header or "1")
    except ValueError:
        seconds = 1.0
    return max(0.0, min(MAX_WAIT_S, seconds)) if seconds == seconds else 1.0


async def _read_into(resp: aiohttp.ClientResponse, buf: bytearray, limit: int) -> None:
    """Append the body to `buf`, refused as soon as `buf` would pass `limit` bytes; what arrived
    before a failure stays in `buf`."""
    declared = resp.content_length
    if declared is not None and len(buf) + declared > limit:
        raise BodyTooLarge(f"state of {len(buf) + declared} bytes is over the {limit}-byte limit")
    async for chunk in resp.content.iter_chunked(1 << 16):
        if len(buf) + len(chunk) > limit:
            raise BodyTooLarge(f"state passed the {limit}-byte limit")
        buf += chunk


async def fetch_state(client: aiohttp.ClientSession, url: str, *, limit: int, resumes: int,
                      timeout_for: Callable[[int], aiohttp.ClientTimeout]) -> bytes:
    """The signed state `url` serves, up to `limit` bytes. A transfer that breaks after bytes have
    arrived asks for the rest of the same frame up to `resumes` times; `timeout_for(n)` is the
    deadline of a request made once n bytes have arrived. Raises what the last attempt raised, or
    RuntimeError for an answer that is neither the state nor its continuation."""
    got, etag, left = bytearray(), None, resumes
    while True:
        headers = {"Range": f"bytes={len(got)}-", "If-Range": etag} if got and etag else {}
        try:
            async with client.get(url, headers=headers, timeout=timeout_for(len(got))) as resp:
                if resp.status == 429 and got and left > 0:
                    left -= 1
                    await asyncio.sleep(_retry_after(resp.headers.get("Retry-After")))
                    continue
                if resp.status == 206 and headers:
                    total = resumed_total(resp.headers.get("Content-Range"), len(got))
                    if total is None or resp.headers.get("ETag") != etag:
                        raise RuntimeError("a resumed state answer did not continue where the transfer stopped")
                    await _read_into(resp, got, min(limit, total))
                elif resp.status == 200:
                    got.clear()  # the whole frame: ours, or a newer one where the peer published since
                    etag = resp.headers.get("ETag")
                    await _read_into(resp, got, limit)
                else:
                    raise RuntimeError(describe_status(resp.status))
            return bytes(got)
        except RESUMABLE:
            if not (got and etag and left > 0):
                raise
            left -= 1
