"""Package names imported when first asked for (PEP 562): a package lists where each public name
lives, and `import package` loads none of those modules, so a command's `--help` reads a table
without importing torch. `protocol`, `peer.core`, `gossip_tts.audio` and `simnet` export their names so."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_names(package: str, home: dict[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: a name of `home` (name → the module defining it) is
    imported on its first use and kept in the package, so each is imported once."""

    def __getattr__(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[name]), name)
        vars(sys.modules[package])[name] = value  # asked once
        return value

    return __getattr__
