"""Which characters of a text a model's training texts never held.

The model reads UTF-8 bytes: an emoji, a CJK or Hebrew character in a model trained on
English texts is a run of bytes it never saw, and it speaks noise for them. Synthesis says
so in one line instead of silently (the checkpoint records the bytes of a sample of its
training texts; one without that record is taken to know printable ASCII).
"""

from __future__ import annotations

from typing import Iterable

ALWAYS_KNOWN = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}
"""Printable ASCII and whitespace: a sample of the training texts may lack a rare letter
or sign of a script it is written in, and warning about `Q` would be noise."""
NAMED_AT_MOST = 8


def unseen_characters(text: str, seen: Iterable[int] | None) -> list[str]:
    """The distinct characters of `text`, in order, whose UTF-8 bytes are not all in `seen`
    (or ASCII); None: the checkpoint has no record, so only ASCII counts as seen."""
    known = ALWAYS_KNOWN | set(seen or ())
    return [ch for ch in dict.fromkeys(text) if not set(ch.encode("utf-8")) <= known]


def unseen_warning(text: str, seen: Iterable[int] | None) -> str | None:
    """One line naming the characters the model was not trained on, or None when there are none."""
    chars = unseen_characters(text, seen)
    if not chars:
        return None
    named = ", ".join(f"{ch!r} (U+{ord(ch):04X})" for ch in chars[:NAMED_AT_MOST])
    if len(chars) > NAMED_AT_MOST:
        named += f" and {len(chars) - NAMED_AT_MOST} more"
    return (f"--text holds characters whose bytes this model's training texts did not: {named}; "
            "it was never taught to say them (rewrite them in the training texts' script)")
