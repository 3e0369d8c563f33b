"""Reading HTTP bodies with a hard cap, so no peer can make us buffer more than we allow."""

from __future__ import annotations

import aiohttp


class BodyTooLarge(Exception):
    """A body (declared or received) was larger than the caller's limit."""


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The response body, refused as soon as its declared or received size passes `limit`.

    The Content-Length is checked before anything is read; without one, the body is read
    in chunks and refused at the first byte past the limit. The client session must be
    created with `auto_decompress=False`, or a small compressed body could still expand.
    """
    declared = resp.content_length
    if declared is not None and declared > limit:
        raise BodyTooLarge(f"body of {declared} bytes is over the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body passed the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)
