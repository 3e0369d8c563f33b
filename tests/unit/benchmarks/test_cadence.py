"""benchmarks/cadence.py runs every arm at every period and prints figures a reader can check."""

import json
import subprocess
import sys

import pytest

from tests.paths import REPO

SCRIPT = REPO / "benchmarks" / "cadence.py"


def test_every_arm_runs_at_every_period_and_is_reported():
    out = subprocess.run([sys.executable, str(SCRIPT), "--duration", "2", "--periods", "1,4", "--seeds", "0",
                          "--arm", "before=gossip:gossip.per_period=false", "--arm", "ddp2=allreduce:model_args.lr=0.2"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "machine:" in out.stdout
    result = json.loads(out.stdout.rsplit("ratio: ", 1)[1])["seed0"]
    arms = ("gossip", "local_sgd", "diloco", "sparseloco", "noloco", "before")
    runs = {f"{arm}_h{h}" for arm in arms for h in (1, 4)} | {"allreduce", "alone", "ddp2"}
    assert set(result) == runs
    for name, row in result.items():
        assert row["final"] is not None and row["final"] > 0, name
        assert row["bytes_per_step"] is not None, name
    # the exact average moves bytes; the peers cut apart send only their hellos
    assert result["local_sgd_h1"]["bytes_per_step"] > result["local_sgd_h4"]["bytes_per_step"] > 0
    assert result["alone"]["bytes_per_step"] < result["gossip_h1"]["bytes_per_step"]
    assert result["ddp2"]["bytes_per_step"] == result["allreduce"]["bytes_per_step"]  # DDP at its own step size
    assert result["ddp2"]["final"] != result["allreduce"]["final"]
    assert "| ddp2 |" in out.stdout
    # SparseLoCo's top-k 2-bit messages, all-gathered, against an fp32 all-reduce; a pair's two copies
    assert 0 < result["sparseloco_h4"]["bytes_per_step"] < 0.2 * result["local_sgd_h4"]["bytes_per_step"]
    assert result["noloco_h4"]["bytes_per_step"] == pytest.approx(8 / 7 * result["local_sgd_h4"]["bytes_per_step"])


@pytest.mark.parametrize("arm", ["x=nope", "1bad=gossip", "x=gossip:nosuch", "alone=allreduce"])
def test_a_bad_arm_is_one_clear_line(arm):
    out = subprocess.run([sys.executable, str(SCRIPT), "--arm", arm], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "--arm" in out.stderr
