"""Parsing the project's own source in tests that read it (purity, import direction, cycles).

`parse` is `ast.parse` with the garbage collector held off. CPython 3.11 keeps one AST-building
depth counter per interpreter: a collection during a build that finalizes something with an
unraisable error has that error formatted, 3.11's traceback parses source for its carets, and the
inner parse resets the counter, so the outer one fails with "AST constructor recursion depth
mismatch" (SystemError) — in whichever test happened to be parsing when an earlier test's leftover
object was collected.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse(source: str | Path, filename: str | None = None) -> ast.Module:
    """The module's syntax tree; `source` is the text or a file to read (UTF-8)."""
    if isinstance(source, Path):
        filename = filename or str(source)
        source = source.read_text(encoding="utf-8")
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename=filename or "<unknown>")
    finally:
        if enabled:
            gc.enable()


def imported_names(path: Path, package: str) -> set[str]:
    """Every dotted name an import statement of the file `path`, a module of `package`, may refer
    to: `import a.b` gives a.b; `from a import b` gives a and a.b (b may be a module); relative
    imports are resolved against `package`. Function-level and TYPE_CHECKING imports count too:
    they are the same coupling with the error deferred."""
    names: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names
