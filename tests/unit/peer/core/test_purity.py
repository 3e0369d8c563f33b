"""peer/core stays sans-IO: no event loop, threads, sockets, clocks or HTTP, so the real
driver and simnet's driver run the very same decisions (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.source_ast import parse

ROOT = REPO / "peer" / "core"
FILES = sorted(ROOT.glob("*.py"))
FORBIDDEN_MODULES = {"asyncio", "aiohttp", "socket", "zeroconf", "time", "datetime", "threading",
                     "concurrent", "multiprocessing", "selectors", "pickle", "gossip_tts", "simnet"}
ALLOWED_PEER_MODULES = {"peer.core", "peer.trainer"}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
    return names


def test_the_core_is_all_here() -> None:
    assert {p.name for p in FILES} >= {"session.py", "node.py", "table.py", "mixer.py", "view.py", "config.py",
                                       "actions.py", "hello.py", "outbox.py", "addresses.py"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_io_threads_or_clocks(path: Path) -> None:
    for name in _imports(path):
        assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"
        if name.split(".")[0] == "peer":
            assert any(name == m or name.startswith(m + ".") for m in ALLOWED_PEER_MODULES), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_modules_are_small_and_documented(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= 400
    assert ast.get_docstring(parse(text)), f"{path.name} has no module docstring"
