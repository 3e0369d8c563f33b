"""Word and character error rates: how far what an ASR heard is from what the clip should say.

Both sides are normalised the same way first (lowercase, punctuation dropped, whitespace
collapsed), so a comma or a capital never counts as an error; only words and letters do.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Sequence

_NOT_WORD = re.compile(r"[^a-z0-9' ]+")
_EDGE_APOSTROPHES = re.compile(r"(^|\s)'+|'+(\s|$)")


def normalise_text(text: str) -> str:
    """Lowercase ASCII words separated by single spaces; apostrophes kept only inside words."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    spaced = _NOT_WORD.sub(" ", folded.replace("-", " "))
    return " ".join(_EDGE_APOSTROPHES.sub(" ", f" {spaced} ").split())


def edit_distance(ref: Sequence, hyp: Sequence) -> int:
    """Levenshtein distance: the fewest substitutions, deletions and insertions turning ref into hyp."""
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        current = [i]
        for j, h in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


@dataclass(frozen=True)
class ErrorCount:
    """Edits against the reference length; rates over many clips sum both before dividing."""

    edits: int
    length: int

    @property
    def rate(self) -> float:
        """edits / reference length; a clip whose reference is empty scores 0 if nothing was heard, else 1."""
        if self.length == 0:
            return 0.0 if self.edits == 0 else 1.0
        return self.edits / self.length

    def __add__(self, other: "ErrorCount") -> "ErrorCount":
        return ErrorCount(self.edits + other.edits, self.length + other.length)


def word_errors(reference: str, heard: str) -> ErrorCount:
    ref, hyp = normalise_text(reference).split(), normalise_text(heard).split()
    return ErrorCount(edit_distance(ref, hyp), len(ref))


def char_errors(reference: str, heard: str) -> ErrorCount:
    ref, hyp = normalise_text(reference), normalise_text(heard)
    return ErrorCount(edit_distance(ref, hyp), len(ref))


def total(counts: Sequence[ErrorCount]) -> ErrorCount:
    """The corpus-level count (as ASR papers report it): long clips weigh by their length."""
    out = ErrorCount(0, 0)
    for count in counts:
        out = out + count
    return out
