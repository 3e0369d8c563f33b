"""benchmarks/cadence.py runs every arm at every period and prints figures a reader can check."""

import json
import subprocess
import sys

import pytest

from tests.paths import REPO

SCRIPT = REPO / "benchmarks" / "cadence.py"


def test_every_arm_runs_at_every_period_and_is_reported():
    out = subprocess.run([sys.executable, str(SCRIPT), "--duration", "2", "--periods", "1,4", "--seeds", "0",
                          "--arm", "before=gossip:gossip.per_period=false"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "machine:" in out.stdout
    result = json.loads(out.stdout.rsplit("ratio: ", 1)[1])["seed0"]
    runs = {f"{arm}_h{h}" for arm in ("gossip", "local_sgd", "diloco", "before") for h in (1, 4)} | {"allreduce", "alone"}
    assert set(result) == runs
    for name, row in result.items():
        assert row["final"] is not None and row["final"] > 0, name
        assert row["bytes_per_step"] is not None, name
    # the exact average moves bytes; the peers cut apart send only their hellos
    assert result["local_sgd_h1"]["bytes_per_step"] > result["local_sgd_h4"]["bytes_per_step"] > 0
    assert result["alone"]["bytes_per_step"] < result["gossip_h1"]["bytes_per_step"]


@pytest.mark.parametrize("arm", ["x=nope", "1bad=gossip", "x=gossip:nosuch"])
def test_a_bad_arm_is_one_clear_line(arm):
    out = subprocess.run([sys.executable, str(SCRIPT), "--arm", arm], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "--arm" in out.stderr
