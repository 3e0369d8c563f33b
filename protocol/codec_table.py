"""The codec table: every tensor codec a spec string may name, in one place.

The parser (`protocol.codecs.parse_codec`), the mixing rate a codec allows
(`peer.core.gossip_config.default_gamma`), the period's denser codec (`peer.core.period_codec`),
the CLI's help and docs/wire.md's table (`python -m protocol.codec_table`) all read `KINDS`, so
a new codec is its class and one entry here. Torch-free: `gossip-tts --help` reads it, and each
builder imports its class when first called.

Grammar: `NAME[:ARG]` for a dense codec, `NAME:F[+V]` for a sparse one (F a plain decimal
fraction in (0, 1]; V a dense codec for the kept values, fp16 when left out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from .codecs_dense import CodecBase

__all__ = ["CodecKind", "SpecParts", "KINDS", "DEFAULT_VALUES", "register", "kind_named", "read_spec", "kept_fraction",
           "grammar", "markdown_table", "MAX_SPEC_CHARS"]

MAX_SPEC_CHARS = 64
DEFAULT_VALUES = "fp16"
"""The value codec of a sparse spec that names none (left out of its canonical form)."""
_FRACTION = re.compile(r"(?:0|[1-9][0-9]{0,8})(?:\.[0-9]{1,12})?")
_BLOCK = re.compile(r"block=([1-9][0-9]{0,5})")


@dataclass(frozen=True)
class CodecKind:
    """One codec family as a spec string names it."""

    name: str
    """The name a spec starts with (the canonical one)."""
    form: str
    """Its place in the grammar, as help and docs show it: `int8[:block=N]`."""
    about: str
    """What it sends, in a phrase (docs/wire.md's table)."""
    build: Callable[[Optional[str], "Optional[CodecBase]"], "CodecBase"]
    """The codec from the text after `:` (None without one) and, for a sparse kind, the value
    codec; a ValueError saying what was expected for a bad argument."""
    sparse: bool = False
    """Keeps a fraction F of the entries, named by the spec: the mixing rate follows F."""
    takes_argument: bool = False
    """A dense kind that may be followed by `:ARG` (sparse kinds always take F)."""
    aliases: tuple[str, ...] = ()
    """Other names for it, read as `name`."""


@dataclass(frozen=True)
class SpecParts:
    """A spec string split by the grammar, before any codec is built."""

    kind: CodecKind
    argument: Optional[str]
    """The text after `:`, None without one."""
    values: Optional["SpecParts"] = None
    """A sparse kind's value codec (`DEFAULT_VALUES` where the spec names none)."""


def _identity(arg: Optional[str], values: "Optional[CodecBase]") -> "CodecBase":
    from .codecs_dense import IdentityCodec

    return IdentityCodec()


def _fp16(arg: Optional[str], values: "Optional[CodecBase]") -> "CodecBase":
    from .codecs_dense import FP16Codec

    return FP16Codec()


def _bf16(arg: Optional[str], values: "Optional[CodecBase]") -> "CodecBase":
    from .codecs_dense import BF16Codec

    return BF16Codec()


def _int8(arg: Optional[str], values: "Optional[CodecBase]") -> "CodecBase":
    from .codecs_dense import Int8Codec

    if arg is None:
        return Int8Codec()
    match = _BLOCK.fullmatch(arg)
    if match is None or int(match.group(1)) > 65536:
        raise ValueError("expected block=N, 1 <= N <= 65536")
    return Int8Codec(int(match.group(1)))


def _sparse(kind: str) -> Callable[[Optional[str], "Optional[CodecBase]"], "CodecBase"]:
    def build(arg: Optional[str], values: "Optional[CodecBase]") -> "CodecBase":
        from .codecs_sparse import SparseCodec

        assert arg is not None and values is not None  # read_spec checked both
        return SparseCodec(kind, arg, values)

    return build


KINDS: list[CodecKind] = [
    CodecKind("identity", "identity", "exact float32", _identity, aliases=("fp32",)),
    CodecKind("fp16", "fp16", "every entry as float16", _fp16),
    CodecKind("bf16", "bf16", "every entry as bfloat16", _bf16),
    CodecKind("int8", "int8[:block=N]", "every entry as int8, one fp32 scale per block of N (256)", _int8,
              takes_argument=True),
    CodecKind("topk", "topk:F[+V]", "the ⌈F·N⌉ largest magnitudes, their indices Elias-Fano coded",
              _sparse("topk"), sparse=True),
    CodecKind("randk", "randk:F[+V]", "⌈F·N⌉ entries drawn from the frame's seed (no indices sent)",
              _sparse("randk"), sparse=True),
]
"""Every codec, in the order help and docs list them."""


def register(kind: CodecKind) -> None:
    """Add a codec family; its names must be new."""
    taken = {name for known in KINDS for name in (known.name, *known.aliases)}
    clash = taken & {kind.name, *kind.aliases}
    if clash:
        raise ValueError(f"codec name {sorted(clash)[0]!r} is already registered")
    KINDS.append(kind)


def kind_named(name: str) -> Optional[CodecKind]:
    """The kind a spec's name (or an alias) stands for; None for none."""
    return next((kind for kind in KINDS if name == kind.name or name in kind.aliases), None)


def grammar() -> str:
    """Every form, as one line: what a bad spec's error and the CLI's help name."""
    return ", ".join(form for kind in KINDS for form in (kind.form, *kind.aliases))


def _dense_part(part: str, spec: str) -> SpecParts:
    name, colon, arg = part.partition(":")
    kind = kind_named(name)
    if kind is None:
        raise ValueError(f"unknown codec {part!r} in {spec!r}; expected one of: {grammar()}")
    if kind.sparse:
        raise ValueError(f"{name!r} cannot encode the values of a sparse codec in {spec!r}")
    if colon and not kind.takes_argument:
        raise ValueError(f"codec {name!r} takes no argument, got {part!r} in {spec!r}")
    return SpecParts(kind, arg if colon else None)


def read_spec(spec: str) -> SpecParts:
    """A spec string split by the grammar; ValueError naming the bad part otherwise. Arguments
    of dense kinds are checked when built (`protocol.codecs.parse_codec`)."""
    if not isinstance(spec, str):
        raise ValueError(f"codec spec must be a str, got {type(spec).__name__}")
    if not spec or len(spec) > MAX_SPEC_CHARS:
        raise ValueError(f"codec spec must be 1..{MAX_SPEC_CHARS} characters, got {len(spec)}")
    head, plus, values = spec.partition("+")
    name, colon, arg = head.partition(":")
    kind = kind_named(name)
    if kind is None or not kind.sparse:
        if plus:
            sparse = " and ".join(k.name for k in KINDS if k.sparse)
            raise ValueError(f"'+{values}' in {spec!r}: only {sparse} take a value codec")
        return _dense_part(head, spec)
    if not colon or _FRACTION.fullmatch(arg) is None:
        raise ValueError(f"bad {name} fraction {arg!r} in {spec!r}; expected a decimal like 0.01")
    if "+" in values:
        raise ValueError(f"too many '+' parts in {spec!r}")
    return SpecParts(kind, arg, _dense_part(values if plus else DEFAULT_VALUES, spec))


def kept_fraction(spec: str) -> Fraction:
    """The share of the entries a frame under `spec` carries: F for a sparse kind, 1 otherwise.
    The consensus step that stays stable under a codec shrinks with it (CHOCO-SGD's δ)."""
    parts = read_spec(spec)
    return Fraction(parts.argument) if parts.kind.sparse else Fraction(1)


def markdown_table() -> str:
    """docs/wire.md's table of codecs (a test keeps the page equal to it)."""
    rows = ["| spec | sends |", "|---|---|"]
    rows += [f"| {', '.join(f'`{form}`' for form in (kind.form, *kind.aliases))} | {kind.about} |" for kind in KINDS]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
