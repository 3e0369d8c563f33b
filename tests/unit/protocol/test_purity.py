"""protocol/ stays pure (docs/architecture.md): no I/O frameworks, clocks, global randomness or
pickle, no imports from the packages above it, small modules, typed public functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.source_ast import parse

ROOT = REPO / "protocol"
FILES = sorted(ROOT.glob("*.py"))
FORBIDDEN_MODULES = {"asyncio", "aiohttp", "socket", "zeroconf", "time", "random", "datetime",
                     "threading", "pickle", "marshal", "shelve", "peer", "gossip_tts", "simnet",
                     "async_opt"}
FORBIDDEN_ATTRIBUTES = {("np", "random"), ("numpy", "random"), ("torch", "rand"), ("torch", "randn"),
                        ("torch", "randint"), ("torch", "randperm"), ("torch", "manual_seed"),
                        ("torch", "seed"), ("os", "urandom"), ("os", "getrandom")}


def _tree(path: Path) -> ast.Module:
    return parse(path)


def test_there_are_modules_to_check() -> None:
    assert {p.name for p in FILES} >= {"__init__.py", "identity.py", "codecs.py", "frame.py",
                                       "limits.py", "replay.py", "errors.py", "messages.py"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_imports_stay_inside_the_rules(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_global_randomness(path: Path) -> None:
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert (node.value.id, node.attr) not in FORBIDDEN_ATTRIBUTES, f"{path.name}: {ast.unparse(node)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_modules_are_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 400


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_public_functions_are_typed_and_documented(path: Path) -> None:
    tree = _tree(path)
    assert ast.get_docstring(tree), f"{path.name} has no module docstring"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            assert node.returns is not None, f"{path.name}: {node.name} has no return type"
            args = [a for a in node.args.args + node.args.kwonlyargs if a.arg not in ("self", "cls")]
            assert all(a.annotation is not None for a in args), f"{path.name}: {node.name} args untyped"
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            assert ast.get_docstring(node), f"{path.name}: class {node.name} has no docstring"
