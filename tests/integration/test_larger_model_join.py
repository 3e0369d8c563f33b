"""A peer joins a larger model's swarm and both mix, with the request timeout scaled down by size.

At the `100m` preset a snapshot is 430 MB: a joiner's state and the first exchange of each pair
carry one, and a fixed request timeout cut them (docs/performance.md#a-peer-at-the-sizes-users-train).
The `small` preset is 18× smaller, so this test scales `request_timeout_s` down by the same
factor: every transfer deadline (`SessionConfig.transfer_deadline_s`) is then what the 100m
preset gets, divided by 18, and a deadline that did not grow with the snapshot would cut
them here as it did there. The 100m run itself, with its command, is in docs/performance.md.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slow  # two real peers of a 6M-parameter model: minutes on 2 cores

SIZE_RATIO = 107.5 / 6.03  # parameters of the 100m preset over those of `small`
REQUEST_TIMEOUT_S = 30.0 / SIZE_RATIO  # the default, scaled as the snapshot is
WITHIN_S = 180.0


def _args(data, ckpt, *extra: str) -> list[str]:
    return ["--preset", "small", "--device", "cpu", "--threads", "1", "--batch-size", "2", "--max-frames", "384",
            "--data", str(data), "--checkpoint-dir", str(ckpt), "--log-every", "2", "--listen", "127.0.0.1:0",
            "--no-mdns", *extra]


def _counter(address: str, name: str) -> float:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=20) as resp:
        text = resp.read().decode()
    m = re.search(rf"^gossip_tts_{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_joiner_adopts_the_state_of_a_larger_model_and_both_mix_within_three_minutes(corpus, tmp_path):
    from tests.integration.peers import PeerProcess

    env = {"GOSSIP_TTS_SESSION_REQUEST_TIMEOUT_S": f"{REQUEST_TIMEOUT_S:.3f}"}
    first = PeerProcess(_args(corpus["shard0"], tmp_path / "a"), tmp_path / "a.log", env=env)
    joiner = None
    try:
        address = first.wait_listening(180)
        first.wait_for(r"^step [2-9]", 300)
        joiner = PeerProcess(_args(corpus["shard1"], tmp_path / "b", "--peer", address), tmp_path / "b.log", env=env)
        started = time.monotonic()
        joiner_address = joiner.wait_listening(180)
        joiner.wait_for(r"joined: adopted the state of", WITHIN_S)
        mixed = {}
        while time.monotonic() - started < WITHIN_S:
            mixed = {a: _counter(a, "mixes_total") for a in (address, joiner_address)}
            if all(v >= 1 for v in mixed.values()):
                break
            time.sleep(2)
        failures = {a: _counter(a, "exchange_failures_total") for a in (address, joiner_address)}
        print(f"within {time.monotonic() - started:.0f} s of the joiner's start: mixes {mixed}, "
              f"exchange failures {failures}")
        assert all(v >= 1 for v in mixed.values()), (mixed, failures, joiner.text()[-2000:])
    finally:
        for p in (first, joiner):
            if p is not None:
                p.kill()
