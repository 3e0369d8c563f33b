"""Imports point one way (docs/architecture.md): gossip_tts → peer → protocol, async_opt and
gossip_tts → simnet → peer. A module that imports against that arrow ties a lower layer to a
higher one (simnet could no longer reuse the peer without the TTS model, protocol could no
longer be tested alone); this test reads every import statement, lazy ones included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "protocol": {"peer", "simnet", "gossip_tts", "async_opt"},
    "async_opt": {"peer", "simnet", "gossip_tts", "protocol"},
    "peer": {"simnet", "gossip_tts"},
    "simnet": {"gossip_tts"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_against_the_arrow(package: str) -> None:
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert wrong, f"no modules found under {package}/"
    offenders = {module: names for module, names in wrong.items() if names}
    assert not offenders, f"{package}/ must not import {sorted(FORBIDDEN[package])}: {offenders}"
