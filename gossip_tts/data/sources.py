"""Where shards come from: a local folder or file, or an http(s) URL.

`list_shards(source)` accepts:
- a local folder: every `*.tar` directly inside it (not hidden, not recursive), sorted;
- a local `.tar` file, or a `file://` URL to either of the above;
- a local or http(s) `.txt` file listing shards, one per line (names relative to the list's
  own location, or absolute http(s) URLs / paths); blank lines and `#` comments ignored;
- an http(s) URL ending in `.tar`: that one shard;
- any other http(s) URL is taken as a folder: its `shards.txt` is read if it exists,
  otherwise the folder URL itself is fetched and every link ending in `.tar` on that page
  is taken (the index page `python -m http.server` and most web servers generate), sorted.

HTTP goes through `http_get` (http and https only, also across redirects). Every read has
the deadlines of `DataLimits` (a stall timeout between bytes, a wall-time deadline for the
whole listing or shard), and a local listing is read up to MAX_LISTING_BYTES like a remote one.
Readers call `open_shard` from their prefetch thread, so a slow server stalls that thread,
never the training loop.
"""

from __future__ import annotations

import re
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable

from gossip_tts.data.bounded_read import BoundedReader, OpenReads, Watchdog
from gossip_tts.data.errors import SourceError
from gossip_tts.data.http_get import http_get, is_http
from gossip_tts.data.limits import DataLimits

MAX_LISTING_BYTES = 4 << 20
_HREF_RE = re.compile(r"\.tar$", re.IGNORECASE)


def _local_path(source: str) -> Path:
    if source.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(source).path))
    return Path(source).expanduser()


def _listing_text(data: bytes, source: str) -> str:
    if len(data) > MAX_LISTING_BYTES:
        raise SourceError(f"listing {source} is larger than {MAX_LISTING_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def _http_text(url: str, limits: DataLimits, reads: OpenReads | None) -> str:
    with http_get(url, limits.stall_timeout_s, limits.shard_deadline_s, reads) as body:
        return _listing_text(body.read(MAX_LISTING_BYTES + 1), url)


class _TarLinks(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href") or ""
            if _HREF_RE.search(urllib.parse.urlsplit(href).path):
                self.links.append(href)


def _parse_list(text: str, base: str, http: bool) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if http:
            url = urllib.parse.urljoin(base, line)
            if not is_http(url):
                raise SourceError(f"shard list {base} names a non-http(s) shard {line!r}")
            out.append(url)
        else:
            out.append(line if is_http(line) else str(Path(base).parent / line))
    return list(dict.fromkeys(out))


def _list_http(url: str, limits: DataLimits, reads: OpenReads | None) -> list[str]:
    path = urllib.parse.urlsplit(url).path
    if path.lower().endswith(".tar"):
        return [url]
    if path.lower().endswith(".txt"):
        return _parse_list(_http_text(url, limits, reads), url, http=True)
    folder = url if url.endswith("/") else url + "/"
    try:
        return _parse_list(_http_text(urllib.parse.urljoin(folder, "shards.txt"), limits, reads), folder, http=True)
    except SourceError as e:
        if e.status != 404:
            raise
    parser = _TarLinks()
    parser.feed(_http_text(folder, limits, reads))
    urls = sorted({urllib.parse.urljoin(folder, h) for h in parser.links})
    return [u for u in urls if is_http(u)]


_PROVIDERS: dict[str, Callable[[], list[str]]] = {}


def provide_listing(source: str, provider: Callable[[], list[str]] | None) -> None:
    """Let `provider()` answer `list_shards(source)` (None: stop). For a store whose shards come and
    go while they are read (`--data swarm:HASH`): it learns when each pass starts and what it reads."""
    if provider is None:
        _PROVIDERS.pop(source, None)
    else:
        _PROVIDERS[source] = provider


def list_shards(source: str, limits: DataLimits | None = None, reads: OpenReads | None = None) -> list[str]:
    """Shard paths or URLs in `source` (see the module doc for what each form means);
    `reads` lets the caller cut an http listing short from another thread.

    Raises SourceError when the source does not exist, cannot be reached, or holds no shard.
    """
    limits = limits or DataLimits()
    provider = _PROVIDERS.get(source)
    if provider is not None:
        shards = provider()
    elif is_http(source):
        shards = _list_http(source, limits, reads)
    else:
        path = _local_path(source)
        if path.is_dir():
            shards = [str(p) for p in sorted(path.glob("*.tar")) if p.is_file() and not p.name.startswith(".")]
        elif path.is_file() and path.suffix.lower() == ".txt":
            with open(path, "rb") as f:
                text = _listing_text(f.read(MAX_LISTING_BYTES + 1), str(path))
            shards = _parse_list(text, str(path), http=False)
        elif path.is_file():
            shards = [str(path)]
        else:
            raise SourceError(f"shard source {source!r} does not exist; --data takes a folder of latent tars "
                              "(gossip-tts pack writes them), a .tar file or an http(s) URL")
    if not shards:
        raise SourceError(f"shard source {source!r} holds no .tar shard; pack recordings into one with "
                          "gossip-tts pack SRC_DIR OUT_DIR")
    return shards


def open_shard(shard: str, limits: DataLimits | None = None, reads: OpenReads | None = None) -> BoundedReader:
    """Open one shard for sequential reading (a local file or a streaming HTTP body) under
    `limits`' deadlines; aborting `reads` cuts it short from another thread."""
    limits = limits or DataLimits()
    if is_http(shard):
        return http_get(shard, limits.stall_timeout_s, limits.shard_deadline_s, reads)
    try:
        f = open(_local_path(shard), "rb")
    except OSError as e:
        raise SourceError(f"cannot open shard {shard}: {e}") from e
    return BoundedReader(f, Watchdog(shard, limits.shard_deadline_s, limits.stall_timeout_s, reads))
