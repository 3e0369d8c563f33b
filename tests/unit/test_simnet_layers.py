"""simnet's folders import one way (docs/architecture.md): runs → attacks → driver → world.

The world (clock, links, cost and speed models, model registry) knows no peer; the driver
knows no attack and no run; attacks know no run. A module importing against that arrow would
tie a layer to the one that builds it, as the swarm and its peers once held each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "simnet"
LAYERS = ["world", "driver", "attacks", "runs"]
"""Lowest first: each folder may import only the ones before it."""


def imported_folders(path: Path) -> set[str]:
    """The simnet folders a module imports from, lazy imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
        found.update(n.split(".")[1] for n in names if n.startswith("simnet.") and n.count(".") >= 1)
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_simnet_folders_import_one_way(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1:])
    modules = sorted((ROOT / layer).rglob("*.py"))
    assert modules, f"no modules under simnet/{layer}/"
    offenders = {str(p.relative_to(ROOT)): sorted(imported_folders(p) & above) for p in modules}
    offenders = {m: names for m, names in offenders.items() if names}
    assert not offenders, f"simnet/{layer}/ must not import {sorted(above)}: {offenders}"
