"""simnet's folders import one way (docs/architecture.md): runs → attacks → driver → world.

The world (clock, links, cost and speed models, model registry) knows no peer; the driver
knows no attack and no run; attacks know no run. A module importing against that arrow would
tie a layer to the one that builds it, as the swarm and its peers once held each other.
Within simnet and gossip_tts/train no two files import each other in a loop, lazy and
TYPE_CHECKING imports included (the probe and the trainer once did)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.source_ast import parse

ROOT = REPO / "simnet"
LAYERS = ["world", "driver", "attacks", "runs"]
"""Lowest first: each folder may import only the ones before it."""


def imported_folders(path: Path) -> set[str]:
    """The simnet folders a module imports from, lazy imports included."""
    found: set[str] = set()
    for node in ast.walk(parse(path)):
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


def module_imports(path: Path, root: Path) -> set[str]:
    """The modules a file imports (package names as written), lazy and TYPE_CHECKING ones included."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


@pytest.mark.parametrize("folder", ["simnet", "gossip_tts/train"])
def test_no_two_files_import_each_other_in_a_loop(folder: str) -> None:
    root = ROOT.parent
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted((root / folder).rglob("*.py"))}
    edges = {m: sorted(i for i in module_imports(p, root) if i in files and i != m) for m, p in files.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in edges[m]:
            if state.get(n) == 1:
                return path[path.index(n):] + [n] if n in path else [m, n]
            if n not in state and (loop := visit(n, path + [n])):
                return loop
        state[m] = 2
        return None

    for m in files:
        if m not in state and (loop := visit(m, [m])):
            pytest.fail(f"import cycle: {' -> '.join(loop)}")
