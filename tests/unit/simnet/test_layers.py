"""simnet's folders import one way (docs/architecture.md): runs → attacks → driver → world.

The world (clock, links, cost and speed models, model registry) knows no peer; the driver
knows no attack and no run; attacks know no run. A module importing against that arrow would
tie a layer to the one that builds it, as the swarm and its peers once held each other.
(That no two files import each other in a loop is tests/unit/project/test_import_cycles.py's.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import REPO
from tests.source_ast import imported_names

ROOT = REPO / "simnet"
LAYERS = ["world", "driver", "attacks", "runs"]
"""Lowest first: each folder may import only the ones before it."""


def imported_folders(path: Path) -> set[str]:
    """The simnet folders a module imports from, lazy and relative imports included."""
    package = ".".join(path.relative_to(REPO).parent.parts)
    return {n.split(".")[1] for n in imported_names(path, package) if n.startswith("simnet.")}


@pytest.mark.parametrize("layer", LAYERS)
def test_simnet_folders_import_one_way(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1:])
    modules = sorted((ROOT / layer).rglob("*.py"))
    assert modules, f"no modules under simnet/{layer}/"
    offenders = {str(p.relative_to(ROOT)): sorted(imported_folders(p) & above) for p in modules}
    offenders = {m: names for m, names in offenders.items() if names}
    assert not offenders, f"simnet/{layer}/ must not import {sorted(above)}: {offenders}"
