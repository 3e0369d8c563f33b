"""A stranger attacks a running peer over HTTP; each attack is refused, counted, or bounded,
and the victim keeps training with a finite loss (SECURITY.md)."""

from __future__ import annotations

import json
import math
import re
import socket
import time
import urllib.error
import urllib.request

import pytest
import torch

from protocol import VerifyPolicy, decode_frame
from protocol.limits import Limits
from tests.adversarial.conftest import Forger
from tests.integration.conftest import tiny_args
from tests.integration.peers import PeerProcess

pytestmark = pytest.mark.slow  # attacks on a real victim peer process: run by .ci/run's slow section


def _request(url: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _hold_open(address: str, declared: int) -> socket.socket:
    """Send the headers of a large body and a few bytes of it, then nothing."""
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(f"POST /v1/exchange HTTP/1.1\r\nHost: {address}\r\nContent-Length: {declared}\r\n\r\n".encode() + b"x" * 100)
    return s


def _metric(base: str, line_start: str) -> float:
    text = _request(base + "/metrics")[1].decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start)]
    return sum(values)


def _victim(corpus, tmp_path, name: str, swarm: str, env: dict[str, str]) -> PeerProcess:
    return PeerProcess(tiny_args(corpus["shard0"], tmp_path / name, "--listen", "127.0.0.1:0", "--swarm", swarm,
                                 "--no-mdns", steps=100000), tmp_path / f"{name}.log", env=env)


def _poison_with_a_huge_snapshot(v: PeerProcess, base: str, swarm: str, fingerprint: str, numel: int) -> list[float]:
    """A never-seen key sends a finite snapshot of all 1e18; returns the victim's losses after it."""
    forger = Forger(swarm, fingerprint, torch.full((numel,), 1e18), seed=b"\x66" * 32)
    assert forger.push(base) == 200  # a first contact for a ticket, then the push that carries the snapshot
    seen = len(re.findall(r"^step \d+ loss", v.text(), re.M))
    deadline = time.monotonic() + 120
    while len(re.findall(r"^step \d+ loss", v.text(), re.M)) < seen + 8 and time.monotonic() < deadline:
        time.sleep(0.5)
    return [float(x) for x in re.findall(r"^step \d+ loss (\S+)", v.text(), re.M)[seen:]]


def _numel(base: str, swarm: str, fingerprint: str) -> int:
    status, state = _request(base + "/v1/state")
    assert status == 200
    policy = VerifyPolicy(swarm=swarm, fingerprint=fingerprint, limits=Limits())
    return decode_frame(state, policy, now=time.time()).header.tensors[0].shape[0]


def test_a_stranger_cannot_poison_flood_or_pin_the_victim(corpus, tmp_path, swarm_name):
    # Pushed copies pull here (pull_only off), so that the poison reaches the mix and clipping
    # alone must hold it; with the default a stranger's push never moves the victim at all.
    env = {"GOSSIP_TTS_NET_BODY_READ_TIMEOUT_S": "2", "GOSSIP_TTS_NET_STATE_EVERY_S": "60",
           "GOSSIP_TTS_GOSSIP_PULL_ONLY": "false"}
    v = _victim(corpus, tmp_path, "victim", swarm_name, env)
    try:
        base = f"http://{v.wait_listening()}"
        v.wait_for(r"^step \d+ ", timeout=120)
        fingerprint = json.loads(_request(base + "/v1/status")[1])["fingerprint"]

        # A compressed body is refused before it is read (it could expand past every limit).
        status, _ = _request(base + "/v1/exchange", b"\x1f\x8b" + b"\0" * 64, {"Content-Encoding": "gzip"})
        assert status == 415

        # Full states: one per address per state_every_s; the next is refused, not signed and sent.
        numel = _numel(base, swarm_name, fingerprint)
        assert _request(base + "/v1/state")[0] == 429

        # Slow bodies hold a connection only until the body deadline, and at most 4 at once per address.
        held = [_hold_open(v.address, 4_000_000) for _ in range(4)]  # under the body cap (the frame limit)
        time.sleep(0.5)
        assert _request(base + "/v1/exchange", b"not a frame")[0] == 429
        time.sleep(2.5)  # past the 2 s body deadline: all four were dropped
        for s in held:
            s.close()
        assert _metric(base, 'gossip_tts_http_refused_total{reason="slow_body"}') >= 4
        assert _metric(base, 'gossip_tts_http_refused_total{reason="too_many_open"}') >= 1

        # The poison is clipped to a radius the sender cannot set: training goes on, finite.
        losses = _poison_with_a_huge_snapshot(v, base, swarm_name, fingerprint, numel)
        assert len(losses) >= 8 and all(math.isfinite(x) and x < 10 for x in losses), losses
        assert _metric(base, "gossip_tts_mix_clipped_total") >= 1
        assert "rolled back" not in v.text()  # clipping alone held; the rollback guard was not needed
    finally:
        v.kill()


def test_control_undefended_the_same_snapshot_poisons_the_victim(corpus, tmp_path, swarm_name):
    undefended = {"GOSSIP_TTS_GOSSIP_CLIP": "false", "GOSSIP_TTS_GOSSIP_PULL_ONLY": "false",
                  "GOSSIP_TTS_LOOP_GOOD_STATE_EVERY_STEPS": "0"}
    v = _victim(corpus, tmp_path, "control", swarm_name, undefended)
    try:
        base = f"http://{v.wait_listening()}"
        v.wait_for(r"^step \d+ ", timeout=120)
        fingerprint = json.loads(_request(base + "/v1/status")[1])["fingerprint"]
        losses = _poison_with_a_huge_snapshot(v, base, swarm_name, fingerprint, _numel(base, swarm_name, fingerprint))
        assert losses and not all(math.isfinite(x) and x < 10 for x in losses), losses
    finally:
        v.kill()


def test_with_the_defaults_a_strangers_pushed_snapshot_never_moves_the_victim(corpus, tmp_path, swarm_name):
    """Pull-only: the victim never chose the stranger as a partner, so its copy is held, not mixed,
    even with clipping off (the control above, pushed copies pulling, is poisoned)."""
    v = _victim(corpus, tmp_path, "pull_only", swarm_name, {"GOSSIP_TTS_GOSSIP_CLIP": "false",
                                                            "GOSSIP_TTS_LOOP_GOOD_STATE_EVERY_STEPS": "0"})
    try:
        base = f"http://{v.wait_listening()}"
        v.wait_for(r"^step \d+ ", timeout=120)
        fingerprint = json.loads(_request(base + "/v1/status")[1])["fingerprint"]
        losses = _poison_with_a_huge_snapshot(v, base, swarm_name, fingerprint, _numel(base, swarm_name, fingerprint))
        assert len(losses) >= 8 and all(math.isfinite(x) and x < 10 for x in losses), losses
        assert _metric(base, "gossip_tts_mixes_total") == 0
    finally:
        v.kill()
