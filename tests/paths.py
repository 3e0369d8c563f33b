"""Where the repository lies: the nearest folder above this file that holds pyproject.toml.

Tests name files by REPO / "docs" / ... rather than counting parent folders from their own
path, so a test file can move to another folder without pointing somewhere else."""

from __future__ import annotations

from pathlib import Path


def repo_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` (this file by default) that holds pyproject.toml."""
    here = (start or Path(__file__)).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    raise FileNotFoundError(f"no pyproject.toml at or above {here}")


REPO = repo_root()
"""The repository's root folder (the one holding pyproject.toml, README.md and the packages)."""
