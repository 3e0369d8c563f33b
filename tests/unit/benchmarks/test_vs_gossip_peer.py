"""The per-thread CPU accounting behind the gossip arm's `gossip_cpu_s` and `train_cpu_s`."""

from __future__ import annotations

import sys
import threading
import time

from tests.paths import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from vs_gossip_peer import ThreadCPU  # noqa: E402


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_thread_cpu_splits_training_from_node_worker_and_keeps_a_dead_threads_last_sample() -> None:
    cpu = ThreadCPU(every_s=0.02)
    cpu.start()
    worker = threading.Thread(target=_burn, args=(0.3,), name="gossip-node_0")
    worker.start()
    worker.join()  # gone before stop(): only the sampler's last look at it remains
    _burn(0.1)
    kinds = cpu.stop()
    assert kinds["gossip-node"] > 0.2
    assert 0.08 < kinds["training"] < kinds["gossip-node"]
    assert "gossip-net" not in kinds
