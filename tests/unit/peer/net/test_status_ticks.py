"""The status page's loss axis always has at least two labelled ticks (peer/net/static/status.html).

`niceTicks` picks a round step of at least (hi − lo) / count; a step of 5 over a range of 8 can
leave one tick in the range, and a lone peer's flat loss curve once drew one y tick. The page's
own functions are run here with node over many ranges."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.paths import REPO

PAGE = REPO / "peer/net/static/status.html"


def _function(source: str, name: str) -> str:
    match = re.search(rf"^function {name}\(.*?^}}", source, re.S | re.M)
    assert match, f"{name} not found in {PAGE}"
    return match.group(0)


def _ticks(ranges: list[tuple[float, float]]) -> list[list[float]]:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("needs node to run the page's script (apt install nodejs)")
    source = PAGE.read_text()
    helpers = "".join(_function(source, name) + "\n" for name in ("ticksEvery", "niceTicks"))
    script = helpers + f"console.log(JSON.stringify({json.dumps(ranges)}.map(([lo, hi]) => niceTicks(lo, hi, 4))));"
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def test_every_range_gets_between_two_and_nine_ticks_inside_it() -> None:
    ranges = [(1.21, 1.29001)]  # a step of 0.05 over 0.08: one tick before
    ranges += [(lo, lo + width) for lo in (0.0, 0.013, 0.5, 1.21, 7.3) for width in (1e-4, 0.003, 0.08, 0.8001, 2.5, 40.0)]
    for (lo, hi), ticks in zip(ranges, _ticks(ranges)):
        assert 2 <= len(ticks) <= 9, (lo, hi, ticks)
        assert all(lo - 1e-12 <= t <= hi + 1e-9 * (hi - lo) for t in ticks), (lo, hi, ticks)
