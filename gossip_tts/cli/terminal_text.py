"""Text a terminal shows and does not obey: whatever a peer sent is escaped before it is printed.

A terminal acts on control characters (ESC opens sequences that clear the screen or set the
window title, BEL rings, CR rewrites the line, LF starts a forged line; C1 codes such as the
8-bit CSI do the same on some terminals) and on invisible formatting characters (a
right-to-left override reorders what follows). Each of those becomes a visible Python-style
escape; everything else, non-ASCII letters and block characters included, is kept.
"""

from __future__ import annotations

import unicodedata

_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Control, format, surrogate, private-use, unassigned, line and paragraph separators."""


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object) -> str:
    """`str(text)` with every character a terminal would act on written as an escape."""
    text = str(text)
    if text.isprintable() and text.isascii():  # the common case: nothing to look at
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in text)
