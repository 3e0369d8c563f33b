"""Reaching the published echo-tts package (an optional extra) for its model and codec code.

`import echo_tts` runs the package's __init__, which imports its inference module and with it
torchaudio, torchcodec and huggingface_hub (for its own file loading and downloads). Its
model.py and autoencoder.py need none of them (torch, numpy, einops), so where a full import
fails they are loaded straight from the installed package's files: that keeps the extra
usable beside a torch that has no matching torchaudio build.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

INSTALL_HINT = "pip install 'gossip-tts[echo]'"


def echo_module(name: str) -> ModuleType:
    """`echo_tts.<name>` ("model" or "autoencoder") from the installed echo-tts package."""
    qualified = f"echo_tts.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    try:
        return importlib.import_module(qualified)
    except ImportError as full_import_error:
        spec = importlib.util.find_spec("echo_tts")  # locates the package without running it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"the echo-tts package is not installed; install it with: {INSTALL_HINT}") from full_import_error
        path = Path(next(iter(spec.submodule_search_locations))) / f"{name}.py"
        file_spec = importlib.util.spec_from_file_location(qualified, path)
        if file_spec is None or file_spec.loader is None or not path.is_file():
            raise ImportError(f"echo-tts has no {name}.py at {path}; install it with: {INSTALL_HINT}") from full_import_error
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[qualified] = module
        try:
            file_spec.loader.exec_module(module)
        except Exception:
            del sys.modules[qualified]
            raise
        return module
