"""Scenarios as TOML files: a few built in by name (simnet/scenarios/*.toml), or any file.

Layout of a scenario file:

    name = "stragglers"
    description = "..."
    compare = [["gossip", "allreduce"]]     # ratios a/b reported
    [world]                                 # WorldConfig: n_peers, model, speed, links, ...
    [[runs]]                                # one per method/variant
    name = "gossip"
    method = "gossip"
    [runs.set.gossip]                       # optional overrides of the world for this run
    clip = false
"""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from simnet.runs.config import RunSpec, SimConfig, build

_TOP_KEYS = {"name", "description", "compare", "world", "runs", "seed"}


def builtin_scenarios() -> list[str]:
    """Names of the scenarios shipped with simnet."""
    folder = resources.files("simnet") / "scenarios"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def read_scenario_text(name_or_path: str) -> tuple[str, str]:
    """(text, where) of a built-in scenario name or a TOML file path."""
    if name_or_path in builtin_scenarios():
        res = resources.files("simnet") / "scenarios" / f"{name_or_path}.toml"
        return res.read_text("utf-8"), f"built-in scenario {name_or_path!r}"
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ValueError(f"scenario file {path} does not exist")
        return path.read_text("utf-8"), str(path)
    names = ", ".join(builtin_scenarios())
    raise ValueError(f"unknown scenario {name_or_path!r}: give a built-in name ({names}) or a .toml file")


def load_scenario(name_or_path: str, **overrides: Any) -> SimConfig:
    """Parse and validate a scenario; keyword arguments override SimConfig fields (seed, out_dir, ...)."""
    text, where = read_scenario_text(name_or_path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return scenario_from_dict(data, where, **overrides)


def scenario_from_dict(data: dict[str, Any], where: str = "scenario", **overrides: Any) -> SimConfig:
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown top-level key(s) {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        raise ValueError(f"{where}: needs at least one [[runs]] table")
    specs = [build(RunSpec, r, f"{where}: [[runs]] #{i + 1}") for i, r in enumerate(runs)]
    fields: dict[str, Any] = {
        "name": str(data.get("name", Path(where).stem)),
        "description": str(data.get("description", "")),
        "base": data.get("world", {}),
        "runs": specs,
        "compare": data.get("compare", []),
        "seed": int(data.get("seed", 0)),
    }
    fields.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return SimConfig(**fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
