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

HTTP goes through urllib with a timeout and only http/https handlers (no file:// or ftp://
reached through a listing or a redirect). Readers call `open_shard` from their prefetch
thread, so a slow server stalls that thread, never the training loop.
"""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import BinaryIO

from gossip_tts.data.errors import SourceError

MAX_LISTING_BYTES = 4 << 20
_HREF_RE = re.compile(r"\.tar$", re.IGNORECASE)

_opener = urllib.request.OpenerDirector()
for _handler in (
    urllib.request.HTTPHandler(),
    urllib.request.HTTPSHandler(),
    urllib.request.HTTPRedirectHandler(),
    urllib.request.HTTPDefaultErrorHandler(),
    urllib.request.HTTPErrorProcessor(),
):
    _opener.add_handler(_handler)


def is_http(source: str) -> bool:
    return urllib.parse.urlsplit(source).scheme.lower() in ("http", "https")


def _local_path(source: str) -> Path:
    if source.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(source).path))
    return Path(source).expanduser()


def _http_open(url: str, timeout: float) -> BinaryIO:
    try:
        return _opener.open(urllib.request.Request(url, headers={"User-Agent": "gossip-tts"}), timeout=timeout)
    except urllib.error.HTTPError as e:
        e.close()
        raise SourceError(f"cannot fetch {url}: HTTP {e.code} {e.reason}", status=e.code) from e
    except urllib.error.URLError as e:
        raise SourceError(f"cannot reach {url}: {e.reason}") from e
    except (socket.timeout, TimeoutError) as e:
        raise SourceError(f"cannot reach {url}: timed out after {timeout:g} s") from e
    except (OSError, ValueError) as e:
        raise SourceError(f"cannot reach {url}: {e}") from e


def _http_text(url: str, timeout: float) -> str:
    with _http_open(url, timeout) as resp:
        try:
            data = resp.read(MAX_LISTING_BYTES + 1)
        except (OSError, socket.timeout) as e:
            raise SourceError(f"cannot read {url}: {e}") from e
    if len(data) > MAX_LISTING_BYTES:
        raise SourceError(f"listing {url} is larger than {MAX_LISTING_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


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


def _list_http(url: str, timeout: float) -> list[str]:
    path = urllib.parse.urlsplit(url).path
    if path.lower().endswith(".tar"):
        return [url]
    if path.lower().endswith(".txt"):
        return _parse_list(_http_text(url, timeout), url, http=True)
    folder = url if url.endswith("/") else url + "/"
    try:
        return _parse_list(_http_text(urllib.parse.urljoin(folder, "shards.txt"), timeout), folder, http=True)
    except SourceError as e:
        if e.status != 404:
            raise
    parser = _TarLinks()
    parser.feed(_http_text(folder, timeout))
    urls = sorted({urllib.parse.urljoin(folder, h) for h in parser.links})
    return [u for u in urls if is_http(u)]


def list_shards(source: str, timeout: float = 30.0) -> list[str]:
    """Shard paths or URLs in `source` (see the module doc for what each form means).

    Raises SourceError when the source does not exist, cannot be reached, or holds no shard.
    """
    if is_http(source):
        shards = _list_http(source, timeout)
    else:
        path = _local_path(source)
        if path.is_dir():
            shards = [str(p) for p in sorted(path.glob("*.tar")) if p.is_file() and not p.name.startswith(".")]
        elif path.is_file() and path.suffix.lower() == ".txt":
            shards = _parse_list(path.read_text("utf-8", errors="replace"), str(path), http=False)
        elif path.is_file():
            shards = [str(path)]
        else:
            raise SourceError(f"shard source {source!r} does not exist")
    if not shards:
        raise SourceError(f"shard source {source!r} holds no .tar shard")
    return shards


def open_shard(shard: str, timeout: float = 30.0) -> BinaryIO:
    """Open one shard for sequential reading (a local file or a streaming HTTP response)."""
    if is_http(shard):
        return _http_open(shard, timeout)
    try:
        return open(_local_path(shard), "rb")
    except OSError as e:
        raise SourceError(f"cannot open shard {shard}: {e}") from e
