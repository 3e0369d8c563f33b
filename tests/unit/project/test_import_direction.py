"""Imports point one way (docs/architecture.md): gossip_tts → peer → protocol, async_opt and
gossip_tts → simnet → peer; inside the peer, peer.net → peer.local → peer.core; inside
gossip_tts, cli → apps → the subpackages (audio, data, model, train). A module that
imports against that arrow ties a lower layer to a higher one (simnet could no longer reuse the
peer without the TTS model, protocol could no longer be tested alone, the pure core would carry
the event loop); this test reads every import statement, lazy ones included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.paths import REPO
from tests.source_ast import imported_names

ROOT = REPO
FORBIDDEN = {
    "protocol": {"peer", "simnet", "gossip_tts", "async_opt"},
    "async_opt": {"peer", "simnet", "gossip_tts", "protocol"},
    "peer": {"simnet", "gossip_tts"},
    "simnet": {"gossip_tts"},
}
FORBIDDEN_INSIDE = {
    "peer/core": {"peer.local", "peer.net"},
    "peer/local": {"peer.net"},
    "gossip_tts/apps": {"gossip_tts.cli"},
    "gossip_tts/judge": {"gossip_tts.cli"},
    **dict.fromkeys(("gossip_tts/audio", "gossip_tts/data", "gossip_tts/model", "gossip_tts/train"),
                    {"gossip_tts.cli", "gossip_tts.apps"}),
}
"""The command line (gossip_tts.cli) is the top: what a command runs (gossip_tts.apps) never
reaches back into it, and the pieces it is built of know neither."""


def imported_packages(path: Path) -> set[str]:
    """The top-level packages `path` imports (relative imports resolve inside its own)."""
    return {name.split(".")[0] for name in imported_modules(path) if name}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_against_the_arrow(package: str) -> None:
    wrong = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
             for path in sorted((ROOT / package).rglob("*.py"))}
    assert wrong, f"no modules found under {package}/"
    offenders = {module: names for module, names in wrong.items() if names}
    assert not offenders, f"{package}/ must not import {sorted(FORBIDDEN[package])}: {offenders}"


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """The full dotted names `path` imports, relative imports resolved against its package."""
    return imported_names(path, ".".join(path.relative_to(root).parent.parts))


@pytest.mark.parametrize("folder", sorted(FORBIDDEN_INSIDE))
def test_no_wing_imports_against_the_arrow(folder: str) -> None:
    def against(name: str) -> bool:
        return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN_INSIDE[folder])

    wrong = {str(path.relative_to(ROOT)): sorted(n for n in imported_modules(path) if against(n))
             for path in sorted((ROOT / folder).rglob("*.py"))}
    assert wrong, f"no modules found under {folder}/"
    offenders = {module: names for module, names in wrong.items() if names}
    assert not offenders, f"{folder}/ must not import {sorted(FORBIDDEN_INSIDE[folder])}: {offenders}"


def test_the_wing_check_sees_a_relative_import(tmp_path: Path) -> None:
    """The control: `from ..net import driver` inside peer/core is read as peer.net.driver."""
    module = tmp_path / "peer" / "core" / "sneaky.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    from ..net import driver\n")
    assert "peer.net.driver" in imported_modules(module, root=tmp_path)
