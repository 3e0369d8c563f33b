"""Helpers for simnet tests: build a scenario from dicts, run it quietly, return the summary."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from simnet import run
from simnet.runs.scenario import scenario_from_dict


def simulate(world: dict[str, Any], runs: list[dict[str, Any]], compare: list[list[str]] = (), *,
             seed: int = 0, lines: list[str] | None = None, **overrides: Any) -> dict:
    cfg = scenario_from_dict({"name": "test", "world": world, "runs": runs, "compare": list(compare)},
                             seed=seed, **overrides)
    sink = lines.append if lines is not None else (lambda s: None)
    return run(cfg, emit=lambda s: None, echo=sink)


@pytest.fixture
def sim() -> Callable[..., dict]:
    return simulate
