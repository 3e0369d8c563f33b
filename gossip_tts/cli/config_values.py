"""Typed values for config files and env vars: coercion by a dataclass field's type, and TOML out.

Env vars are strings and TOML has no None or tuples, so every value a user can give goes
through `coerce` against the type the dataclass declares; anything it cannot express (a
frozenset of keys, say) is refused with the field's name rather than passed on half-parsed.
"""

from __future__ import annotations

import json
import math
import types
import typing
from pathlib import Path
from typing import Any

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ValueProblem(ValueError):
    """A value that does not fit its field's type (the caller adds where it came from)."""


def coerce(value: Any, tp: Any) -> Any:
    """`value` (a TOML value, an env string, or a click value) as an instance of type `tp`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
            if len(args) < len(typing.get_args(tp)):
                return None
        if len(args) == 1:
            return coerce(value, args[0])
        raise ValueProblem(f"cannot be set here (type {tp})")
    if origin in (list, tuple):
        items = _items(value)
        args = typing.get_args(tp)
        if origin is list:
            return [coerce(v, args[0] if args else str) for v in items]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(v, args[0]) for v in items)
        if len(items) != len(args):
            raise ValueProblem(f"expected {len(args)} values, got {len(items)}")
        return tuple(coerce(v, a) for v, a in zip(items, args))
    if tp is bool:
        return _bool(value)
    if tp is int:
        return _number(value, int)
    if tp is float:
        return _number(value, float)
    if tp is str:
        if isinstance(value, (str, Path)):
            return str(value)
        raise ValueProblem(f"expected a string, got {value!r}")
    if tp is Path:
        if isinstance(value, (str, Path)):
            return Path(value).expanduser()
        raise ValueProblem(f"expected a path, got {value!r}")
    raise ValueProblem(f"cannot be set from a file or the environment (type {getattr(tp, '__name__', tp)})")


def settable(tp: Any) -> bool:
    """Whether a file or env var can give a value of this type (else only code can set it)."""
    origin, args = typing.get_origin(tp), [a for a in typing.get_args(tp) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return len(args) == 1 and settable(args[0])
    if origin in (list, tuple):
        return all(settable(a) for a in args if a is not Ellipsis)
    return tp in (bool, int, float, str, Path)


def _items(value: Any) -> list[Any]:
    if isinstance(value, str):  # env var: comma-separated
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ValueProblem(f"expected a list, got {value!r}")


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueProblem(f"expected true or false, got {value!r}")


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool):
        raise ValueProblem(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)) and (kind is float or isinstance(value, int)):
        return kind(value)
    if isinstance(value, str):
        try:
            return kind(value.strip().replace("_", ""))
        except ValueError:
            pass
    noun = "an integer" if kind is int else "a number"
    raise ValueProblem(f"expected {noun}, got {value!r}")


def toml_value(value: Any) -> str | None:
    """A TOML literal for `value`, or None when TOML cannot express it (None, bytes, sets)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        parts = [toml_value(v) for v in value]
        return None if any(p is None for p in parts) else "[" + ", ".join(parts) + "]"  # type: ignore[arg-type]
    return None


def render_toml(sections: dict[str, dict[str, tuple[Any, str]]], header: str = "") -> str:
    """TOML text of {section: {field: (value, note)}}; a non-empty note becomes a trailing comment."""
    lines = [f"# {line}" for line in header.splitlines()]
    for name, fields in sections.items():
        lines += ["", f"[{name}]"]
        for field, (value, note) in fields.items():
            literal = toml_value(value)
            comment = f"  # {note}" if note else ""
            if literal is None:
                lines.append(f"# {field} = (unset){comment}")
            else:
                lines.append(f"{field} = {literal}{comment}")
    return "\n".join(lines).lstrip("\n") + "\n"
