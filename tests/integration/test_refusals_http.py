"""Bad frames over HTTP: refused with a 4xx, counted in /metrics by reason, training goes on."""

import json
import time
import urllib.error
import urllib.request

import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from protocol import Identity
from tests.integration.conftest import tiny_args
from tests.integration.peers import last_step


def _post(url: str, body: bytes) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def _forger(swarm: str, fingerprint: str, numel: int, seed: bytes) -> GossipNode:
    node = GossipNode(GossipConfig(swarm=swarm), Identity.generate(seed), {"w": ((numel,), "float32")}, torch.zeros(numel),
                      now=time.time())
    node.fingerprint = fingerprint  # pretend to run the same model
    node.policy = node.policy.__class__(swarm=swarm, fingerprint=fingerprint)
    return node


def test_bad_frames_get_4xx_are_counted_and_training_continues(corpus, spawn, tmp_path, swarm_name):
    p = spawn("peer", *tiny_args(corpus["shard0"], tmp_path / "p", "--listen", "127.0.0.1:0", "--swarm", swarm_name,
                                 "--no-mdns", steps=100000))
    base = f"http://{p.wait_listening()}"
    p.wait_for(r"^step \d+ ", timeout=120)  # past joining (a joining peer answers 503)
    status = json.loads(_get(base + "/v1/status"))
    assert status["swarm"] == swarm_name

    assert _post(base + "/v1/exchange", b"not a frame") == 400
    stranger = _forger("another-swarm", status["fingerprint"], 8, b"\x01" * 32)
    assert _post(base + "/v1/exchange", stranger.build_request(None, time.time())) == 400
    forger = _forger(swarm_name, status["fingerprint"], 8, b"\x02" * 32)
    body = bytearray(forger.build_request(None, time.time()))
    body[40] ^= 0x01  # a bit of the control frame's header: the signature no longer matches
    assert _post(base + "/v1/exchange", bytes(body)) == 400

    metrics = _get(base + "/metrics")
    for reason in ("wrong_swarm", "bad_signature"):
        assert f'gossip_tts_frames_refused_total{{reason="{reason}"}} 1' in metrics, metrics
    assert "gossip_tts_frames_refused_total{reason=" in metrics
    malformed = [line for line in metrics.splitlines() if line.startswith("gossip_tts_frames_refused_total")
                 and "wrong_swarm" not in line and "bad_signature" not in line]
    assert malformed and float(malformed[0].split()[-1]) >= 1, metrics

    before = last_step(p.text())
    deadline = time.monotonic() + 60
    while last_step(p.text()) <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert last_step(p.text()) > before, "training stopped after the bad frames"
    assert p.proc.poll() is None
