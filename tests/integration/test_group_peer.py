"""A torchrun group as one peer (`gossip-tts peer --nproc 2`, DDP on gloo): rank 0 gossips with a
single-process peer, every rank holds rank 0's parameters after every mix (checked by the group
itself: GOSSIP_TTS_PARALLEL_VERIFY_SYNC), and the checkpoint is written once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.conftest import tiny_args

pytestmark = pytest.mark.slow  # a torchrun group of real peer processes per strategy: run by .ci/run's slow section

STEPS = 60
GLOO_LOOPBACK = {"GLOO_SOCKET_IFNAME": "lo"} if Path("/sys/class/net/lo").exists() else {}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_group_peer_gossips_from_rank_0_and_keeps_its_ranks_equal(corpus, spawn, tmp_path, swarm_name, monkeypatch, strategy):
    for key, value in {**GLOO_LOOPBACK, "GOSSIP_TTS_PARALLEL_VERIFY_SYNC": "true"}.items():
        monkeypatch.setenv(key, value)
    common = ("--listen", "127.0.0.1:0", "--no-mdns", "--swarm", swarm_name, "--gossip-every", "2")
    group = spawn("group", *tiny_args(corpus["shard0"], tmp_path / "g", *common, "--nproc", "2", "--parallel", strategy,
                                      steps=STEPS))
    address = group.wait_listening(timeout=180)
    single = spawn("single", *tiny_args(corpus["shard1"], tmp_path / "s", *common, "--peer", address, steps=STEPS))
    assert group.wait_exit(300) == 0, group.text()[-3000:]
    assert single.wait_exit(300) == 0, single.text()[-3000:]
    text = group.text()
    assert f"group of 2 processes ({strategy}, gloo)" in text
    assert len(re.findall(r"listening on http://", text)) == 1  # only rank 0 runs the network
    verified = re.search(r"every rank held rank 0's parameters after each of (\d+) mixes", text)
    assert verified and int(verified.group(1)) > 0, text[-3000:]
    # samples per progress line count both ranks' batches (8 each)
    assert re.search(r"^stopped at step 60\b", text, re.M), text[-2000:]
    assert sorted(p.name for p in (tmp_path / "g").iterdir() if p.suffix == ".safetensors") == ["checkpoint.safetensors"]
