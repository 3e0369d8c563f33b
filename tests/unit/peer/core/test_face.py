"""peer.core has one face: every file of both drivers imports the core from `peer.core` only,
and its `__all__` names exactly what they use."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import peer.core

from tests.paths import REPO
from tests.source_ast import parse

ROOT = REPO
DRIVERS = ("peer/net/driver.py", "simnet/driver/sim_peer.py")
"""The two drivers that perform the session's actions."""
SIM_DRIVER = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "simnet" / "driver").glob("*.py"))
DRIVER_FILES = tuple(dict.fromkeys((*DRIVERS, "peer/net/node_worker.py", *SIM_DRIVER)))
"""Every file a driver is made of: its worker, and (for simnet) its server and the rest of its folder."""


def _core_imports(path: str) -> list[tuple[str, str]]:
    """(module, name) of every import from peer.core or below in `path`, at any depth."""
    tree = parse(ROOT / path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[:2] == ["peer", "core"]:
            out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names if alias.name.split(".")[:2] == ["peer", "core"]]
    return out


def test_both_drivers_import_the_core_from_its_face_only() -> None:
    assert "simnet/driver/sim_server.py" in DRIVER_FILES
    for path in DRIVERS:
        assert _core_imports(path), path
    for path in DRIVER_FILES:
        assert {module for module, _ in _core_imports(path)} <= {"peer.core"}, path


def test_both_drivers_name_the_driver_contract() -> None:
    for path in DRIVERS:
        names = {name for _, name in _core_imports(path)}
        assert {"Driver", "perform"} <= names, path


def test_the_face_names_exactly_what_the_drivers_use() -> None:
    used = {name for path in DRIVER_FILES for _, name in _core_imports(path)}
    assert set(peer.core.__all__) == used
    assert len(peer.core.__all__) == len(set(peer.core.__all__))
    for name in peer.core.__all__:
        assert hasattr(peer.core, name), name


def test_the_face_imports_each_name_from_where_it_says_and_only_when_asked() -> None:
    tree = parse(ROOT / "peer/core/__init__.py")
    typed = {alias.name: node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             and node.module and node.module.startswith("peer.core.") for alias in node.names}
    assert typed == peer.core._HOME  # what type checkers see is what a driver gets
    code = "import sys, peer.core.config; assert 'torch' not in sys.modules and 'peer.core.node' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode == 0
