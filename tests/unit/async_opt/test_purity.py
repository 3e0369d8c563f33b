"""async_opt stays pure: no I/O, clocks, global randomness or upward imports; every public
name documented with the result it follows; small files."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import async_opt

from tests.source_ast import parse

PKG = Path(async_opt.__file__).parent
SOURCES = sorted(PKG.glob("*.py"))

FORBIDDEN_MODULES = {
    "peer", "gossip_tts", "simnet", "protocol",
    "asyncio", "aiohttp", "socket", "zeroconf", "time", "random", "datetime", "threading",
}
FORBIDDEN_CALLS = {"manual_seed", "seed", "default_rng", "perf_counter", "monotonic"}
GLOBAL_RNG = {"rand", "randn", "randint", "randperm", "normal", "bernoulli", "multinomial"}
CITATIONS = (
    "Koloskova", "Lian", "Yang et al", "Xie", "Karimireddy", "Liu et al", "Douillard", "Yin",
    "Baruch", "Li et al", "Goyal", "Sarfi",
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_forbidden_imports_or_calls(path: Path) -> None:
    tree = parse(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            assert (node.module or "").split(".")[0] not in FORBIDDEN_MODULES, f"{path.name}: from {node.module}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            assert name not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno}: {name}()"
            if name in GLOBAL_RNG:  # allowed only with an explicit generator
                kws = {k.arg for k in node.keywords}
                assert "generator" in kws, f"{path.name}:{node.lineno}: {name}() without generator="


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_files_are_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 400


@pytest.mark.parametrize("name", async_opt.__all__)
def test_public_api_documented_with_its_source(name: str) -> None:
    obj = getattr(async_opt, name)
    if name == "Compressor":  # a type alias, documented in public_copy
        return
    doc = inspect.getdoc(obj) or ""
    assert any(c in doc for c in CITATIONS), f"{name}: docstring names no paper or result"
    if inspect.isclass(obj):
        for attr, member in vars(obj).items():
            if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                assert inspect.getdoc(member), f"{name}.{attr} has no docstring"
