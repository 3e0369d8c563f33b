"""Private swarms: the allow-list of public keys a peer talks to (`--trusted-keys FILE`)."""

from __future__ import annotations

from pathlib import Path

from peer.core.addresses import is_peer_id


def load_trusted_keys(path: str | Path) -> frozenset[bytes]:
    """Public keys from a file: one hex key (a peer id) per line; blank lines and `#` comments ignored.

    Raises ValueError naming the file and line of anything that is not a key, and when the
    file holds none: an empty allow-list would silently refuse everyone.
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"--trusted-keys {path}: cannot read it ({exc.strerror})") from None
    keys = set()
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip().lower()
        if not text:
            continue
        if not is_peer_id(text):
            raise ValueError(f"--trusted-keys {path}:{number}: {text[:80]!r} is not a public key (64 hex characters)")
        keys.add(bytes.fromhex(text))
    if not keys:
        raise ValueError(f"--trusted-keys {path}: the file names no key")
    return frozenset(keys)
