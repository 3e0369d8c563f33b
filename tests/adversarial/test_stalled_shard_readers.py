"""Readers that ask a running peer for shards and never read, from four addresses, two
connections each, never keep an honest client waiting for a shard longer than the stall
window (SECURITY.md). Before, they held all eight upload slots until `upload_deadline_s`
(900 s), and the honest client got 503 all that time."""

from __future__ import annotations

import hashlib
import shutil
import time

import pytest

from gossip_tts.data.swarm_manifest import write_manifest
from tests.adversarial.conftest import connect_from, http, metric, source_ip
from tests.integration.conftest import tiny_args
from tests.integration.peers import PeerProcess

pytestmark = pytest.mark.slow

STALL_S = 3.0
ATTACKERS, CONNECTIONS = 4, 2


def test_stalled_readers_from_four_addresses_never_keep_an_honest_client_waiting(corpus, tmp_path, swarm_name):
    seed = tmp_path / "seed"
    seed.mkdir()
    for tar in sorted(corpus["train"].glob("*.tar")):
        shutil.copy(tar, seed / tar.name)
    manifest = write_manifest(seed)
    largest = max(manifest.shards, key=lambda s: s.size)
    env = {"GOSSIP_TTS_SWARM_DATA_UPLOAD_STALL_S": str(STALL_S), "GOSSIP_TTS_SWARM_DATA_MAX_UPLOAD_MB_S": "0"}
    v = PeerProcess(tiny_args(manifest.swarm_id, tmp_path / "victim", "--listen", "127.0.0.1:0", "--swarm", swarm_name,
                              "--no-mdns", "--manifest", str(seed / "swarm-manifest.json"), steps=100000),
                    tmp_path / "victim.log", env=env)
    held = []
    try:
        base = f"http://{v.wait_listening()}"
        v.wait_for(r"^step \d+ ", timeout=180)
        request = f"GET /v1/shards/{largest.sha256} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        # Four addresses twice each (the per-address cap alone let them fill all eight slots), then
        # eight addresses once each (every slot full: only the stall cut frees one).
        for first, attackers, connections in ((0, ATTACKERS, CONNECTIONS), (ATTACKERS, 8, 1)):
            for i in range(first, first + attackers):
                for _ in range(connections):
                    s = connect_from(v.address, source_ip(i), rcvbuf=4096)
                    s.sendall(request)  # and never read
                    held.append(s)
                    time.sleep(0.2)
            t0, answers = time.monotonic(), []
            while time.monotonic() - t0 < 4 * STALL_S:
                code, body = http(f"{base}/v1/shards/{largest.sha256}", timeout=30)
                answers.append(code)
                if code == 200:
                    break
                time.sleep(0.2)
            waited = time.monotonic() - t0
            assert answers[-1] == 200 and hashlib.sha256(body).hexdigest() == largest.sha256, answers
            assert waited <= STALL_S + 1.0, (attackers, connections, waited, answers)
            time.sleep(STALL_S + 2.0)  # every stalled reader is cut within the window (plus a piece in flight)
        cut = metric(base, 'gossip_tts_http_refused_total{reason="shard_upload_stalled"}')
        shared = metric(base, 'gossip_tts_http_refused_total{reason="shard_uploads_shared"}')
        assert shared >= 1 and cut >= 8 and cut + shared >= ATTACKERS * CONNECTIONS + 8, (cut, shared)
    finally:
        for s in held:
            s.close()
        v.kill()
