"""A /v1/state transfer that resumes where a broken one stopped, instead of starting over.

A joiner's state is the whole model: gigabytes at the sizes users train, which a link that drops
once an hour may never deliver whole. Each answer names the signed frame it carries (`ETag`: the
tail of its Ed25519 signature, distinct for every frame signed); a transfer cut short asks again
for the bytes it lacks (`Range: bytes=N-`) of that same frame (`If-Range`), and a peer that still
serves it sends only those (206). Where it has published since, it serves its new state whole (200),
as RFC 9110 says of a failed `If-Range`, and the joiner starts again from that one. The frame is
verified whole once assembled (`peer.core.join.read_state`), so bytes from two frames spliced
together are refused there, whatever the headers said.

Only the open-ended form `bytes=N-` is served partially: it is all a resume needs, and every other
form gets the whole frame, which a client must accept anyway.
"""

from __future__ import annotations

import re

__all__ = ["state_etag", "resume_offset", "resumed_total"]

_ETAG_BYTES = 16
"""Bytes of the signature's tail an ETag carries: 128 bits tell two frames apart."""
_OPEN_RANGE = re.compile(r"bytes=(\d{1,19})-")
_CONTENT_RANGE = re.compile(r"bytes (\d{1,19})-(\d{1,19})/(\d{1,19})")


def state_etag(frame: bytes) -> str:
    """The strong ETag of a signed state frame (its last bytes are its signature)."""
    return '"' + frame[-_ETAG_BYTES:].hex() + '"'


def resume_offset(range_header: str | None, if_range: str | None, etag: str, size: int) -> int:
    """Where an answer to a request with these headers starts in a frame of `size` bytes whose
    ETag is `etag`: the asked offset where the request names this frame and an offset within it,
    else 0 (the whole frame)."""
    if range_header is None or if_range != etag:
        return 0
    match = _OPEN_RANGE.fullmatch(range_header.strip())
    if match is None:
        return 0
    start = int(match.group(1))
    return start if 0 < start < size else 0


def resumed_total(content_range: str | None, start: int) -> int | None:
    """The frame's whole size from a 206 answer's `Content-Range`, if it covers the bytes from
    `start` to the end of the frame (what a resume asked for); None for anything else."""
    match = _CONTENT_RANGE.fullmatch((content_range or "").strip())
    if match is None:
        return None
    first, last, total = (int(g) for g in match.groups())
    return total if first == start and last == total - 1 and first < total else None
