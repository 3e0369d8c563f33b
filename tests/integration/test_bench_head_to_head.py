"""benchmarks/vs_ddp.py end to end on the TTS workload, briefly: every arm (single, DDP with
and without a straggler, real gossip peers with and without it, the peers alone) starts,
trains the tiny preset and reports, so a change to the peer or the model that breaks the
head-to-head shows here rather than at the next measurement."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_vs_ddp_runs_every_arm_on_the_tts_workload() -> None:
    out = subprocess.run([sys.executable, str(REPO / "benchmarks/vs_ddp.py"), "--workload", "tts", "--peers", "2",
                          "--budget", "10", "--evals", "2", "--plot", ""],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FAILED" not in out.stdout, out.stdout[-3000:]
    assert "TTS preset 'tiny'" in out.stdout
    ratio = json.loads(out.stdout.strip().splitlines()[-1].removeprefix("ratio: "))
    for name in ("loss_gossip_over_ddp", "loss_gossip_over_alone", "loss_gossip_straggler_over_ddp_straggler",
                 "averaged_loss_gossip_over_ddp"):
        assert ratio[name] is not None and math.isfinite(ratio[name]) and 0.2 < ratio[name] < 5, (name, ratio)
    lines = out.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| arm |")).split("|")
    gossip = next(line for line in lines if line.startswith("| gossip x2 |")).split("|")
    assert float(gossip[header.index(" bytes_sent /peer ")]) > 0  # the gossip peers did exchange
