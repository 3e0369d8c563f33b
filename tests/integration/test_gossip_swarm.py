"""Three real peer processes on 127.0.0.1 train one model together.

Each gossip peer trains on its own speaker's shard; the control trains alone on shard 0 for the
same number of steps, beside the swarm. Held-back clips cover all speakers, so a peer that
learned from the others through gossip must beat the control, and gossip must keep the peers'
parameters much closer to each other than to the control's: their mean pairwise distance under
half their distance to the control (a setting that mixes too slowly, such as top-1%, fails it).
"""

import re
from functools import cached_property
from pathlib import Path

import pytest
import torch

from tests.integration.conftest import tiny_args
from tests.integration.peers import PeerProcess
from tests.integration.swarm_checks import eval_loss, flat_params, mean_pairwise_distance

pytestmark = pytest.mark.slow  # three real peer processes train for minutes: run by .ci/run's slow section

STEPS = 400
COMPRESSION = "topk:0.1+int8"


class Control:
    """The lone peer, started once for the module; its results read once it has finished."""

    def __init__(self, process: PeerProcess, folder: Path, val: Path) -> None:
        self.process, self.folder, self.val = process, folder, val

    @cached_property
    def results(self) -> tuple[float, torch.Tensor]:
        """(held-out loss, flat parameters) of its last checkpoint."""
        assert self.process.wait_exit(600) == 0, self.process.text()[-3000:]
        return eval_loss(self.folder, self.val), flat_params(self.folder)


@pytest.fixture(scope="module")
def control(corpus, tmp_path_factory):
    folder = tmp_path_factory.mktemp("control")
    process = PeerProcess(tiny_args(corpus["shard0"], folder / "ckpt", "--solo", steps=STEPS), folder / "control.log")
    try:
        yield Control(process, folder / "ckpt", corpus["val"])
    finally:
        process.kill()


def _run_swarm(corpus, spawn, tmp_path, discovery_args_for):
    peers = []
    for i in range(3):
        args = tiny_args(corpus[f"shard{i}"], tmp_path / f"p{i}", "--listen", "127.0.0.1:0", "--compression", COMPRESSION,
                         *discovery_args_for(i, peers),
                         steps=STEPS)
        p = spawn(f"peer{i}", *args)
        p.wait_listening()
        peers.append(p)
    for p in peers:
        assert p.wait_exit(600) == 0, p.text()[-3000:]
    return peers


def _check(peers, control, corpus, tmp_path):
    for p in peers:
        text = p.text()
        assert "found peer" in text, text[-2000:]
    losses = [eval_loss(tmp_path / f"p{i}", corpus["val"]) for i in range(3)]
    control_loss, x_control = control.results
    xs = [flat_params(tmp_path / f"p{i}") for i in range(3)]
    spread = mean_pairwise_distance(xs)
    to_control = sum(float((x - x_control).norm()) for x in xs) / 3
    print(f"eval: gossip {losses} control {control_loss:.4f}; spread {spread:.3f} vs distance to control {to_control:.3f}")
    assert all(loss < control_loss for loss in losses), (losses, control_loss)
    assert spread < 0.5 * to_control, (spread, to_control)
    return losses, control_loss, spread, to_control


def test_three_peers_by_mdns_and_from_one_bootstrap_address_beat_a_lone_peer(corpus, spawn, tmp_path, swarm_name,
                                                                             control):
    """Peers 0 and 1 find each other by mDNS; peer 2 has mDNS off and is told only peer 0's
    address, so it learns peer 1 by peer exchange. Both ways of finding a swarm, in one swarm."""
    def discovery_args(i, started):
        if i < 2:
            return ["--swarm", swarm_name, "--mdns-interface", "127.0.0.1"]
        return ["--swarm", swarm_name, "--no-mdns", "--peer", started[0].address]

    peers = _run_swarm(corpus, spawn, tmp_path, discovery_args)
    assert all("via mdns" in p.text() for p in peers[:2])
    assert re.search(rf"found peer {re.escape(peers[1].address)} via exchange", peers[2].text()), peers[2].text()[-2000:]
    _check(peers, control, corpus, tmp_path)
