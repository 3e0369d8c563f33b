"""Churn with real processes: a peer is killed mid-run, another joins and catches up.

The joiner is compared with the survivors as they are when it stops, not with where they
would be later: the survivors train on until the joiner has done its own steps and are then
stopped too, so how early the join lands (it varies with the machine's speed) does not
decide the outcome. Measured numbers: docs/benchmarks/peer.md#three-peers-as-processes-and-churn.
"""

import re
import signal
import time

import pytest

from tests.integration.conftest import tiny_args
from tests.integration.peers import last_step
from tests.integration.swarm_checks import eval_loss

pytestmark = pytest.mark.slow  # real peer processes killed and joined over minutes: run by .ci/run's slow section

STEP_LIMIT = 6000  # never reached: every peer here is stopped by a signal
JOINER_STEPS = 60


def test_kill_one_peer_and_a_new_one_joins_from_state(corpus, spawn, tmp_path, swarm_name):
    common = ["--listen", "127.0.0.1:0", "--swarm", swarm_name, "--no-mdns"]
    peers = []
    for i in range(3):
        boot = ["--peer", peers[0].address] if peers else []
        p = spawn(f"peer{i}", *tiny_args(corpus[f"shard{i}"], tmp_path / f"p{i}", *common, *boot, steps=STEP_LIMIT))
        p.wait_listening()
        peers.append(p)
    survivors, victim = peers[:2], peers[2]
    victim.wait_for(r"^step (1[5-9]\d|[2-9]\d\d) ", timeout=300)
    victim.kill(signal.SIGKILL)
    for p in survivors:
        p.wait_for(re.escape(f"evicted peer {victim.address}"), timeout=120)
        assert p.proc.poll() is None, "a survivor stopped when its neighbour died"

    joiner = spawn("joiner", *tiny_args(corpus["shard3"], tmp_path / "joiner", *common, "--peer", survivors[0].address,
                                        steps=STEP_LIMIT))
    joiner.wait_listening()
    joined = joiner.wait_for(r"joined: adopted the state of \S+ \(its step \d+\), counting on from step (\d+)", timeout=120)
    assert int(joined.group(1)) > 0
    joiner.wait_for(rf"^step {int(joined.group(1)) + 1} ", timeout=120)  # it counts on from the adopted step
    deadline = time.monotonic() + 300
    while last_step(joiner.text()) < int(joined.group(1)) + JOINER_STEPS and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in (joiner, *survivors):
        p.kill(signal.SIGTERM)  # a final checkpoint, then exit
        assert p.proc.returncode == 0, p.text()[-2000:]

    control = spawn("control", *tiny_args(corpus["shard3"], tmp_path / "control", "--solo", steps=JOINER_STEPS))
    assert control.wait_exit(300) == 0

    survivor_loss = max(eval_loss(tmp_path / f"p{i}", corpus["val"]) for i in range(2))
    joiner_loss = eval_loss(tmp_path / "joiner", corpus["val"])
    control_loss = eval_loss(tmp_path / "control", corpus["val"])
    print(f"eval: survivors {survivor_loss:.4f} (stopped at steps {[last_step(p.text()) for p in survivors]}) "
          f"joiner {joiner_loss:.4f} (joined at step {joined.group(1)}) fresh control {control_loss:.4f}")
    assert joiner_loss < 1.10 * survivor_loss, (joiner_loss, survivor_loss)
    assert control_loss > 1.3 * survivor_loss, (control_loss, survivor_loss)
