"""Extra runs for `simnet_seeds.py --variant`: a scenario's gossip run with some settings changed.

    --variant 'session.pulls_per_publish=4;gossip.step_scale_power=0.5'

Each variant copies the scenario's `gossip` run and sets SECTION.FIELD to VALUE inside the run's
`set` table (the sections a scenario file's `[[runs]] set` takes: gossip, session, model_args,
...; a FIELD without a section is one of the world's own, such as `duration_s`), so a tuning grid is a command line, printed beside the scenario's own figures, instead of an
edited scenario file. VALUE is read as a TOML value (`4`, `0.5`, `false`, `"fp32"`); a bare word
that is not one is taken as a string (`compression=fp32`). The scenario loader then checks every
field by name, as it checks a scenario file.

    --world 'model_args.samples_per_shard=8192'

changes the world itself, for every run of the scenario (the reference run that sets each seed's
target included): a question about the setting rather than about the rule, such as how much of
a miss the size of each peer's data accounts for.
"""

from __future__ import annotations

import copy
import tomllib
from typing import Any

from simnet.runs.config import merge

__all__ = ["parse_variant", "with_variants", "with_world", "variant_name"]

BASE_RUN = "gossip"


def _value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        if not raw or any(c in raw for c in "\"'[]{}\n"):
            raise ValueError(f"{raw!r} is neither a TOML value nor a bare word") from None
        return raw


def parse_variant(text: str, flag: str = "--variant") -> dict[str, Any]:
    """`'session.pulls_per_publish=4;gossip.step_scale_power=0.5'` -> {section: {field: value}}
    (a FIELD without a section: {field: value}); `;` separates the settings because specs such as
    `staleness` hold commas. `flag` names the option in error messages."""
    out: dict[str, Any] = {}
    for item in text.split(";"):
        key, eq, raw = item.strip().partition("=")
        section, dot, field = key.strip().rpartition(".")
        if not (eq and field and (section or not dot) and "." not in section):
            raise ValueError(f"{flag} {text!r}: {item.strip()!r} is not [SECTION.]FIELD=VALUE")
        try:
            value = _value(raw.strip())
        except ValueError as exc:
            raise ValueError(f"{flag} {text!r}: {key.strip()}: {exc}") from None
        table = out.setdefault(section, {}) if section else out
        if not isinstance(table, dict) or (not section and isinstance(out.get(field), dict)):
            raise ValueError(f"{flag} {text!r}: {key.strip()!r} is set both as a section and as a value")
        table[field] = value
    return out


def variant_name(index: int) -> str:
    """The run name of the index-th variant (1-based): a name scenario files accept."""
    return f"variant{index}"


def with_variants(data: dict[str, Any], variants: list[dict[str, Any]]) -> dict[str, Any]:
    """`data` (a scenario table) with one run per variant appended: the `gossip` run, renamed, with
    the variant's settings merged over its own `set`."""
    if not variants:
        return data
    base = next((r for r in data.get("runs", []) if r.get("name") == BASE_RUN), None)
    if base is None:
        raise ValueError(f"scenario {data.get('name')!r} has no {BASE_RUN!r} run to vary")
    out = copy.deepcopy(data)
    for i, variant in enumerate(variants, 1):
        run = copy.deepcopy(base)
        run["name"] = variant_name(i)
        run["set"] = _merged(run.get("set", {}), variant, f"variant {i}", f"the {BASE_RUN!r} run")
        out["runs"].append(run)
    return out


def with_world(data: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """`data` with `settings` (as `parse_variant` reads them) merged into its `[world]` table, section by
    section: every run sees them, except where its own `set` says otherwise."""
    return {**data, "world": _merged(data.get("world", {}), settings, "--world", "the scenario's world")}


def _merged(table: dict[str, Any], settings: dict[str, Any], who: str, where: str) -> dict[str, Any]:
    """`table` with `settings` merged in as a run's `set` merges over the world (simnet's own
    `merge`), refusing a section given for a setting that is a single value there."""
    for key, value in settings.items():
        current = table.get(key)
        if isinstance(value, dict) and current is not None and not isinstance(current, dict):
            raise ValueError(f"{who}: {key!r} is not a table of settings in {where}")
    return merge(table, settings)
