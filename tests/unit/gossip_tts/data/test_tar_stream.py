"""TarReader: the members tarfile writes, and headers refused before their bodies are read."""

from __future__ import annotations

import io
import tarfile

import pytest

from gossip_tts.data.tar_stream import TarFormatError, TarReader

MiB = 1 << 20


class CountingSource:
    """A byte stream that counts what is read from it; past `data` it yields zeros up to `length`."""

    def __init__(self, data: bytes, length: int | None = None) -> None:
        self.data = data
        self.length = len(data) if length is None else length
        self.pos = 0
        self.read_bytes = 0

    def read(self, n: int) -> bytes:
        n = max(0, min(n, self.length - self.pos))
        out = self.data[self.pos:self.pos + n]
        out += bytes(n - len(out))
        self.pos += n
        self.read_bytes += n
        return out

    def skip(self, n: int) -> int:
        n = max(0, min(n, self.length - self.pos))
        self.pos += n
        return n


def tar_bytes(items: list[tuple[str, bytes]], fmt: int = tarfile.GNU_FORMAT, pax: dict | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, pax_headers=pax or {}) as tf:
        for name, data in items:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        d = tarfile.TarInfo("a-folder")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
    return buf.getvalue()


def header(name: str, size: int, kind: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(tarfile.GNU_FORMAT)


ITEMS = [("k0.npy", b"a" * 700), ("deep/" * 30 + "k1.json", b"{}"), ("n" * 150 + ".ref.npy", b"xyz"), ("ü.npy", b"")]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_reads_what_tarfile_writes_names_sizes_and_bodies(fmt):
    data = tar_bytes(ITEMS, fmt, pax={"comment": "global"} if fmt == tarfile.PAX_FORMAT else None)
    reader = TarReader(CountingSource(data), max_header_bytes=64 << 10)
    got = []
    for m in reader:
        got.append((m.name, m.size, m.is_file, reader.read() if m.is_file and m.size < 500 else None))
    assert got[:-1] == [(n, len(b), True, None if len(b) >= 500 else b) for n, b in ITEMS]
    assert got[-1][2] is False  # the folder


def test_ustar_prefix_names_are_joined():
    data = tar_bytes([("p" * 120 + "/k.npy", b"12")], tarfile.USTAR_FORMAT)
    assert [m.name for m in TarReader(CountingSource(data), 1024)][0] == "p" * 120 + "/k.npy"


def test_unread_bodies_are_skipped_not_read():
    src = CountingSource(tar_bytes([("big.npy", b"\0" * MiB), ("small.json", b"{}")]))
    reader = TarReader(src, 1024)
    assert [m.name for m in reader][:2] == ["big.npy", "small.json"]
    assert src.read_bytes < 16 * 1024


@pytest.mark.parametrize("kind, what", [(tarfile.GNUTYPE_LONGNAME, "GNU long-name"), (tarfile.GNUTYPE_LONGLINK, "GNU long-link"),
                                        (tarfile.XHDTYPE, "pax extended"), (tarfile.XGLTYPE, "pax global")])
def test_a_huge_name_or_pax_header_is_refused_before_its_body_is_read(kind, what):
    src = CountingSource(header("././@LongLink", 1 << 30, kind), length=(1 << 30) + 2048)
    with pytest.raises(TarFormatError, match=f"{what} header at byte 0 claims 1073741824 bytes, over the max_header_bytes limit of 65536"):
        list(TarReader(src, 64 << 10))
    assert src.read_bytes == 512  # the header block only


def test_control_python_tarfile_reads_a_long_name_body_whole():
    """Why the reader parses headers itself: tarfile pulls the whole claimed body into memory."""
    claimed = 8 * MiB
    src = CountingSource(header("././@LongLink", claimed, tarfile.GNUTYPE_LONGNAME) + b"k.npy", length=claimed + 4096)

    class Raw:
        def read(self, n: int) -> bytes:
            return src.read(n)

    with pytest.raises(tarfile.TarError):  # the name is followed by no member; by then it was read whole
        with tarfile.open(fileobj=Raw(), mode="r|") as tf:
            tf.next()
    assert src.read_bytes >= claimed


def test_long_names_and_pax_paths_and_sizes_apply_to_the_next_member():
    body = b"27 path=from-pax/k.ref.npy\n" + b"12 size=300\n"
    data = (header("././@LongLink", 10, tarfile.GNUTYPE_LONGNAME) + b"long-k.npy".ljust(512, b"\0")
            + header("short", 4, tarfile.REGTYPE) + b"abcd".ljust(512, b"\0")
            + header("pax", len(body), tarfile.XHDTYPE) + body.ljust(512, b"\0")
            + header("ignored", 0, tarfile.REGTYPE) + b"p" * 300 + bytes(212) + bytes(1024))
    reader = TarReader(CountingSource(data), 1024)
    first = reader.next()
    assert first is not None and (first.name, reader.read()) == ("long-k.npy", b"abcd")
    second = reader.next()
    assert second is not None and (second.name, second.size, reader.read()) == ("from-pax/k.ref.npy", 300, b"p" * 300)
    assert reader.next() is None


@pytest.mark.parametrize("block, match", [
    (header("k.npy", 10, tarfile.GNUTYPE_SPARSE), "sparse"),
    (b"\1" * 512, "checksum"),
    (header("k.npy", 10, tarfile.REGTYPE)[:148] + b"garbage!" + header("k.npy", 10, tarfile.REGTYPE)[156:], "number|checksum"),
])
def test_sparse_and_damaged_headers_are_refused(block, match):
    with pytest.raises(TarFormatError, match=match):
        list(TarReader(CountingSource(block + bytes(1024)), 1024))


def test_pax_sparse_and_malformed_records_are_refused():
    sparse = b"22 GNU.sparse.major=1\n"
    with pytest.raises(TarFormatError, match="sparse"):
        list(TarReader(CountingSource(header("p", len(sparse), tarfile.XHDTYPE) + sparse.ljust(512, b"\0")
                                      + header("k.npy", 0, tarfile.REGTYPE) + bytes(1024)), 1024))
    for bad in (b"99 path=x\n", b"nonsense\n", b"5 a=b\n", b"1" * 5000 + b" path=x\n"):  # 5000 digits: past int()'s limit
        padded = bad.ljust(-(-len(bad) // 512) * 512, b"\0")
        with pytest.raises(TarFormatError, match="pax header record"):
            list(TarReader(CountingSource(header("p", len(bad), tarfile.XHDTYPE) + padded), 1 << 16))


@pytest.mark.parametrize("size", ["+5", " 5", "1_0", "\u0663", "9" * 5000, "-1"])
def test_a_pax_size_that_is_not_plain_decimal_digits_is_refused(size):
    record = f"path=k.npy\n".encode()
    body = f"size={size}\n".encode()
    records = b""
    for rec in (record, body):
        n = len(rec) + 2
        n += len(str(n + len(str(n)))) - 1  # the length counts its own digits
        records += f"{n} ".encode() + rec
    data = header("p", len(records), tarfile.XHDTYPE) + records.ljust(-(-len(records) // 512) * 512, b"\0")
    with pytest.raises(TarFormatError, match="pax size|pax header record"):
        list(TarReader(CountingSource(data + header("k.npy", 5, tarfile.REGTYPE) + bytes(1536)), 1 << 16))


def test_a_stream_cut_inside_a_body_or_header_is_an_eof_error():
    data = tar_bytes([("k.npy", b"x" * 2000)])
    reader = TarReader(CountingSource(data[:1024]), 1024)
    assert reader.next() is not None
    with pytest.raises(EOFError, match="body"):
        reader.read()
    with pytest.raises(EOFError, match="header"):
        list(TarReader(CountingSource(data[:300]), 1024))


def test_base256_sizes_are_read():
    block = bytearray(header("k.npy", 0, tarfile.REGTYPE))
    block[124:136] = b"\x80" + (5).to_bytes(11, "big")
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    reader = TarReader(CountingSource(bytes(block) + b"hello".ljust(512, b"\0") + bytes(1024)), 1024)
    member = reader.next()
    assert member is not None and member.size == 5 and reader.read() == b"hello"
