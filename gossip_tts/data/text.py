"""Text front ends: how a transcript becomes the byte ids the text encoder reads.

- "bytes": the UTF-8 bytes of the text as written (this project's own models).
- "echo": Echo TTS's front end, so that weights imported from Echo read text the way they
  were trained to: a few punctuation rewrites, a `[S1] ` speaker tag unless the text already
  starts with a tag, then a BOS byte 0 in front of the UTF-8 bytes. Rewritten here from its
  documented behaviour (the echo-tts package is not a dependency of the core).

Nothing here truncates: a text longer than a model accepts is refused or skipped by the
caller, never cut, because a cut transcript no longer describes its audio.
"""

from __future__ import annotations

TEXT_FRONTENDS = ("bytes", "echo")

# Echo's rewrites, in its order: typographic marks to ASCII, line breaks to spaces, and
# colons, semicolons and em dashes to commas (pauses it was trained on).
_ECHO_REWRITES = (
    ("\u2026", "..."),
    ("\u2019", "'"),
    ("\u201d", '"'),
    ("\n", " "),
    (":", ","),
    (";", ","),
    ("\u2014", ", "),
)


def echo_normalize(text: str) -> str:
    """Echo's text normalisation, speaker tag included."""
    for old, new in _ECHO_REWRITES:
        text = text.replace(old, new)
    if not text.startswith(("[", "(")) and "S1" not in text and "S2" not in text:
        text = "[S1] " + text
    return text


def encode_text(text: str, frontend: str = "bytes") -> list[int]:
    """Byte ids of `text` under `frontend` (the vocabulary is the 256 byte values)."""
    if frontend == "bytes":
        return list(text.encode("utf-8"))
    if frontend == "echo":
        return [0, *echo_normalize(text).encode("utf-8")]
    raise ValueError(f"unknown text front end {frontend!r}; choose one of {', '.join(TEXT_FRONTENDS)}")
