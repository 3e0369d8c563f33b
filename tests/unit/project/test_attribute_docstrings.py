"""An attribute's docstring sits right under the assignment it describes: a string statement
after anything else (another docstring, a call, an `if`) documents nothing, and misleads the
reader about which attribute it names."""

from __future__ import annotations

import ast

from tests.paths import REPO
from tests.source_ast import parse

ROOT = REPO
PACKAGES = ("gossip_tts", "peer", "protocol", "async_opt", "simnet", "benchmarks")


def _is_string(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def stray_docstrings(source: str) -> list[int]:
    """Lines of string statements that are neither a body's first statement nor right after an assignment."""
    out = []
    for node in ast.walk(parse(source)):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for before, statement in zip(body, body[1:]):
                if _is_string(statement) and not isinstance(before, (ast.Assign, ast.AnnAssign)):
                    out.append(statement.lineno)
    return sorted(out)


def test_every_attribute_docstring_follows_its_assignment():
    stray = [f"{f.relative_to(ROOT)}:{line}" for package in PACKAGES for f in sorted((ROOT / package).rglob("*.py"))
             for line in stray_docstrings(f.read_text(encoding="utf-8"))]
    assert not stray, "docstrings that follow no assignment:\n" + "\n".join(stray)


def test_a_second_docstring_under_one_attribute_is_found():
    source = 'class A:\n    def __init__(self):\n        self.a = 1\n        """a"""\n        """b, whose attribute moved away"""\n'
    assert stray_docstrings(source) == [5]
    assert stray_docstrings('"""module"""\nX = 1\n"""X"""\n') == []
