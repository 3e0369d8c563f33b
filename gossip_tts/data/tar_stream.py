"""Reading a tar stream member by member, with every size checked before it is read.

Python's tarfile reads a GNU long-name or long-link member and a pax extended header
whole into memory, whatever size its 512-byte header claims, and a sparse map entry by
entry: a few bytes of hostile header buy gigabytes of allocation. This reader parses the
headers itself (ustar, GNU and pax, as tarfile and GNU tar write them) and refuses such a
header larger than `max_header_bytes` before reading its body. Member bodies are never
read here: the caller looks at a member's name and size and then reads it (`read()`) or
lets the next `next()` skip it unread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Protocol

BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")
_NO_BODY = (b"1", b"2", b"3", b"4", b"5", b"6")  # links, devices, directories, fifos: size field ignored
_LONG_NAME, _LONG_LINK = b"L", b"K"
_PAX_ONE, _PAX_ALL, _PAX_SOLARIS = b"x", b"g", b"X"
_SPARSE = b"S"
_PAX_RECORD = re.compile(rb"([0-9]{1,19}) ([^=\n]+)=")  # bounded: int() of thousands of digits raises
_PAX_SIZE = re.compile(r"[0-9]{1,19}")


class TarFormatError(ValueError):
    """A header that is malformed or refused; nothing after it in this tar can be trusted."""


class _Source(Protocol):
    def read(self, n: int) -> bytes: ...

    def skip(self, n: int) -> int: ...


@dataclass(frozen=True)
class TarMember:
    name: str
    size: int
    """Bytes of the member's body (0 for links and directories)."""
    is_file: bool


def _padded(size: int) -> int:
    return -size % BLOCK


def _number(field: bytes, what: str) -> int:
    """An octal ASCII number, or GNU base-256 (first byte 0x80 or 0xff) for big values."""
    if field[:1] in (b"\x80", b"\xff"):
        n = int.from_bytes(field[1:], "big")
        if field[0] == 0xFF:
            n -= 256 ** (len(field) - 1)
    else:
        text = field.split(b"\0", 1)[0].strip(b" ")
        try:
            n = int(text or b"0", 8)
        except ValueError:
            raise TarFormatError(f"{what} field {field!r} is not a number") from None
    if n < 0:
        raise TarFormatError(f"{what} is negative ({n})")
    return n


def _text(field: bytes) -> str:
    end = field.find(b"\0")
    return (field if end < 0 else field[:end]).decode("utf-8", "surrogateescape")


def _checksum_ok(block: bytes) -> bool:
    stored = _number(block[148:156], "checksum")
    rest = block[:148] + b" " * 8 + block[156:]
    if stored == sum(rest):
        return True
    return stored == sum(b - 256 if b > 127 else b for b in rest)  # some old tars summed signed bytes


def _pax_records(data: bytes) -> dict[str, str]:
    """`LENGTH KEY=VALUE\\n` records; LENGTH counts the whole record."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        m = _PAX_RECORD.match(data, pos)
        if m is None:
            raise TarFormatError(f"pax header record at byte {pos} is malformed")
        length = int(m.group(1))
        end = pos + length
        if length <= m.end() - pos or end > len(data) or data[end - 1:end] != b"\n":
            raise TarFormatError(f"pax header record at byte {pos} has a wrong length ({length})")
        out[m.group(2).decode("utf-8", "surrogateescape")] = data[m.end():end - 1].decode("utf-8", "surrogateescape")
        pos = end
    return out


class TarReader:
    """Iterates the members of a tar read sequentially from `source` (`read(n)`, `skip(n)`).

    Raises TarFormatError on a bad or refused header and EOFError where the stream ends in
    the middle of a header or a body. The end of the archive (a zero block, or the stream
    ending exactly between members) ends the iteration.
    """

    def __init__(self, source: _Source, max_header_bytes: int) -> None:
        self._src = source
        self.max_header_bytes = max_header_bytes
        self._unread = 0  # body bytes of the current member not read yet
        self._padding = 0
        self._offset = 0  # where the next header starts, for messages

    def __iter__(self) -> Iterator[TarMember]:
        while True:
            member = self.next()
            if member is None:
                return
            yield member

    def _read_exact(self, n: int, what: str) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while got < n:
            data = self._src.read(n - got)
            if not data:
                raise EOFError(f"the tar ends inside {what} ({got} of {n} bytes)")
            chunks.append(data)
            got += len(data)
        return b"".join(chunks)

    def _skip_exact(self, n: int, what: str) -> None:
        if n and self._src.skip(n) < n:
            raise EOFError(f"the tar ends inside {what}")

    def read(self) -> bytes:
        """The body of the member `next()` returned last; the caller checked its size first."""
        data = self._read_exact(self._unread, "a member's body")
        self._unread = 0
        return data

    def _header_body(self, size: int, kind: str, at: int) -> bytes:
        if size > self.max_header_bytes:
            raise TarFormatError(
                f"{kind} header at byte {at} claims {size} bytes, over the max_header_bytes "
                f"limit of {self.max_header_bytes}; not read")
        data = self._read_exact(size, f"a {kind} header")
        self._skip_exact(_padded(size), f"a {kind} header")
        return data

    def next(self) -> TarMember | None:
        """The next member's name and size, or None at the end of the archive."""
        self._skip_exact(self._unread + self._padding, "a member's body")
        self._unread = self._padding = 0
        long_name: str | None = None
        pax: dict[str, str] = {}
        while True:
            block = self._src.read(BLOCK)
            if len(block) < BLOCK:
                block += self._read_exact(BLOCK - len(block), "a header") if block else b""
            if not block or block == bytes(BLOCK):
                return None
            if not _checksum_ok(block):
                raise TarFormatError(f"header at byte {self._offset} has a bad checksum (not a tar, or damaged)")
            kind, size = block[156:157], _number(block[124:136], "size")
            here = self._offset
            self._offset += BLOCK
            if kind in (_LONG_NAME, _LONG_LINK):
                body = self._header_body(size, "GNU long-name" if kind == _LONG_NAME else "GNU long-link", here)
                if kind == _LONG_NAME:
                    long_name = _text(body)
            elif kind in (_PAX_ONE, _PAX_SOLARIS):
                pax = _pax_records(self._header_body(size, "pax extended", here))
            elif kind == _PAX_ALL:
                self._header_body(size, "pax global", here)  # defaults for later members; names and sizes are per member
            elif kind == _SPARSE or any(k.startswith("GNU.sparse.") for k in pax):
                raise TarFormatError(f"member at byte {here} is a sparse file, which shards never hold")
            else:
                break
            self._offset += size + _padded(size)
        name = pax.get("path") or long_name or _text(block[0:100])
        if block[257:263] == b"ustar\0" and block[345:346] != b"\0" and long_name is None and "path" not in pax:
            name = _text(block[345:500]) + "/" + name
        if "size" in pax:
            if not _PAX_SIZE.fullmatch(pax["size"]):  # int() would take "+5", " 5", "1_0" and "٣"
                raise TarFormatError(f"pax size {pax['size'][:40]!r} of {name!r} is not a decimal number")
            size = int(pax["size"])
        is_file = kind in _REGULAR and not (kind == b"\0" and name.endswith("/"))
        body = 0 if kind in _NO_BODY or (kind == b"\0" and name.endswith("/")) else size
        self._unread, self._padding = body, _padded(body)
        self._offset += body + self._padding
        return TarMember(name=name, size=body, is_file=is_file)
