"""Replays against a real `gossip-tts peer --preset tiny` process on 127.0.0.1.

An eavesdropper keeps a valid, signed exchange that the victim accepted, then sends it again:
after the victim restarted (`--resume`: same key, same checkpoint, a new epoch), and after
4,100 other keys exchanged with it (more senders than a per-sender replay window held). Each
replay must be answered without being applied, and counted by reason. The honest control:
the same sender, doing what an honest peer does, is heard again on its next exchange.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from protocol import Identity, VerifyPolicy, decode_frame, flat_model_spec, read_vector
from tests.integration.conftest import tiny_args
from tests.integration.peers import PeerProcess

pytestmark = pytest.mark.slow

PRESSURE = 4100
PRESSURE_THREADS = 4  # the victim's per-address limit of open requests
NO_STRANGER_RATE = {"GOSSIP_TTS_NET_STRANGER_EXCHANGES_PER_S": "inf", "GOSSIP_TTS_NET_ADDRESS_WORK_PER_S": "inf",
                    "GOSSIP_TTS_NET_KEY_WORK_PER_S": "inf"}
"""The 4,100 first contacts come from one address, far past its stranger rate and its work budget
(NetConfig): the test is about the replay window, so the victim answers them all."""


def _http(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _metric(base: str, line_start: str) -> float:
    text = _http(base + "/metrics")[1].decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start))


def _refused(base: str, reason: str) -> float:
    return _metric(base, f'gossip_tts_frames_refused_total{{reason="{reason}"}}')


def _victim(corpus, tmp_path, swarm: str, name: str, *extra: str) -> PeerProcess:
    args = tiny_args(corpus["shard0"], tmp_path / "victim", "--listen", "127.0.0.1:0", "--swarm", swarm, "--no-mdns",
                     "--checkpoint-every", "1", *extra, steps=100000)
    return PeerProcess(args, tmp_path / f"{name}.log", env=NO_STRANGER_RATE)


def _ready(v: PeerProcess) -> str:
    base = f"http://{v.wait_listening()}"
    v.wait_for(r"^step \d+ ", timeout=180)  # past joining: a joining peer answers 503
    return base


def _sender(base: str, swarm: str, seed: bytes) -> GossipNode:
    """An honest-looking peer of the victim's swarm and model, holding the victim's own state
    (so what it pushes changes nothing of the victim's training)."""
    fingerprint = json.loads(_http(base + "/v1/status")[1])["fingerprint"]
    status, state = _http(base + "/v1/state")
    assert status == 200
    x = read_vector(decode_frame(state, VerifyPolicy(swarm=swarm, fingerprint=fingerprint), now=time.time()))
    node = GossipNode(GossipConfig(swarm=swarm), Identity.generate(seed), {"w": ((x.numel(),), "float32")}, x,
                      now=time.time())
    node.fingerprint = fingerprint  # pretend to run the same model
    node.policy = VerifyPolicy(swarm=swarm, fingerprint=fingerprint, limits=node.limits,
                               model_spec=flat_model_spec(x.numel()))
    return node


def _exchange(node: GossipNode, base: str, key: bytes) -> bytes:
    """One exchange as an honest driver does it; returns the request body (what an eavesdropper keeps)."""
    body = node.build_request(key, time.time())
    status, reply = _http(base + "/v1/exchange", body)
    assert status == 200, reply[:300]
    node.handle_response(reply, time.time())
    return body


def _press(base: str, node: GossipNode, senders: int) -> None:
    """`senders` first contacts, each from a fresh key, `PRESSURE_THREADS` at a time."""
    counter = iter(range(senders))
    lock, failures = threading.Lock(), []

    def work() -> None:
        while True:
            with lock:
                i = next(counter, None)
                if i is None:
                    return
                node.identity = Identity.generate(i.to_bytes(4, "big") * 8)
                body = node.build_request(None, time.time())
            status, _ = _http(base + "/v1/exchange", body)
            if status != 200:
                failures.append(status)

    threads = [threading.Thread(target=work) for _ in range(PRESSURE_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(1800)
    assert not failures, failures[:10]


def test_replays_after_a_restart_and_after_4100_senders_are_refused_and_counted(corpus, tmp_path, swarm_name):
    victim = _victim(corpus, tmp_path, swarm_name, "victim")
    try:
        base = _ready(victim)
        key = bytes.fromhex(victim.peer_id)
        sender = _sender(base, swarm_name, b"\x51" * 32)
        _exchange(sender, base, key)  # a first contact: the victim's ticket
        recorded_at = time.monotonic()
        recorded = _exchange(sender, base, key)  # pushes a snapshot: the exchange the eavesdropper keeps
        assert _metric(base, "gossip_tts_snapshots_received_total") == 1
        victim.proc.send_signal(signal.SIGINT)
        assert victim.wait_exit(120) == 0, victim.text()[-2000:]
    finally:
        victim.kill()

    victim = _victim(corpus, tmp_path, swarm_name, "victim-resumed", "--resume")
    try:
        base = _ready(victim)
        assert victim.peer_id == key.hex() and "resumed from" in victim.text()
        status, _ = _http(base + "/v1/exchange", recorded)
        assert time.monotonic() - recorded_at < 250  # inside the victim's clock-skew window: only the epoch refuses it
        assert status == 200  # answered (with a fresh ticket)...
        assert _refused(base, "stale_epoch") == 1  # ...refused and counted
        assert _metric(base, "gossip_tts_snapshots_received_total") == 0  # nothing of it was applied

        # The honest control: the sender's next exchange is refused the same way and brings it
        # the new epoch's ticket; the one after that is taken.
        _exchange(sender, base, key)
        assert _refused(base, "stale_epoch") == 2
        recorded = _exchange(sender, base, key)
        assert _metric(base, "gossip_tts_snapshots_received_total") == 1

        started = time.monotonic()
        _press(base, _sender(base, swarm_name, b"\x52" * 32), PRESSURE)
        pressure_s = time.monotonic() - started
        assert _metric(base, "gossip_tts_exchanges_unticketed_total") >= PRESSURE
        status, _ = _http(base + "/v1/exchange", recorded)
        assert status == 200 and _refused(base, "stale_ticket") == 1
        assert _metric(base, "gossip_tts_snapshots_received_total") == 1  # still only the honest push
        print(f"{PRESSURE} first contacts in {pressure_s:.1f} s; replay refused as stale_ticket")
        assert victim.proc.poll() is None
    finally:
        victim.kill()
