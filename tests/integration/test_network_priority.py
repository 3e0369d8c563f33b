"""A real peer's network threads (event loop, node worker) run at a lower priority than its
training thread (`NetConfig.network_nice`, Linux), and `0` leaves them as training is."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import tiny_args
from tests.integration.peers import PeerProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def thread_nices(pid: int) -> dict[int, int]:
    """Each thread of `pid` (by id) with its nice value, from /proc (field 19 of stat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        out[int(task.name)] = int(stat.rsplit(")", 1)[1].split()[16])
    return out


@pytest.mark.parametrize("nice", [None, "0"])
def test_the_network_threads_yield_to_training(corpus, tmp_path, swarm_name, nice) -> None:
    args = tiny_args(corpus["shard0"], tmp_path / "p", "--listen", "127.0.0.1:0", "--swarm", swarm_name, "--no-mdns",
                     steps=100000)
    peer = PeerProcess(args, tmp_path / "p.log", env=None if nice is None else {"GOSSIP_TTS_NET_NETWORK_NICE": nice})
    try:
        peer.wait_listening()
        peer.wait_for(r"^step (\d\d+) ", timeout=120)  # publishes were handed to the node worker: its thread runs
        nices = thread_nices(peer.proc.pid)
    finally:
        peer.kill()
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert nices[peer.proc.pid] == base, nices  # the main thread trains
    lowered = [tid for tid, n in nices.items() if n == min(19, base + 10)]
    if nice is None:
        assert len(lowered) >= 2, nices  # the event loop's and the node worker's
    else:
        assert set(nices.values()) == {base}, nices
