"""A corpus shared by the swarm: real peer processes on 127.0.0.1 with --data swarm:HASH (and, in the
second test, swarm-key:PUBKEY: a manifest signed by a trusted key).

Peer A holds the shards (beside its --manifest); B and C start with none. B is also given a
liar (a server advertising every shard and serving the right number of wrong bytes) and must
refuse it, then fetch from A once A is up. C's only holder at first is a slow source that
sends half of each shard and then holds the connection; once B holds the corpus the slow
source is killed, and C must resume that transfer at B from where it stopped: every
byte of the corpus arrives at C exactly once. Both B and C train and serve.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from gossip_tts.data.swarm_manifest import write_manifest, write_signed_manifest
from peer.shards.advert import advert_body, parse_advert
from peer.shards.manifest import Manifest, ShardEntry
from peer.shards.signed import SIGNED_MANIFEST_NAME, sign_manifest
from protocol import Identity
from tests.integration.conftest import tiny_args
from tests.unit.shard_server_helpers import Served

pytestmark = pytest.mark.slow
ENV = {"GOSSIP_TTS_SWARM_DATA_ADVERT_EVERY_S": "1", "GOSSIP_TTS_SWARM_DATA_STALL_TIMEOUT_S": "600"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(address: str, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
        return r.read()


def _metric(address: str, name: str, **labels: str) -> float:
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in _get(address, "/metrics").decode().splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


def _held(address: str, manifest: Manifest) -> int:
    try:
        doc = json.loads(_get(address, "/v1/shards"))
    except OSError:
        return 0
    return len(parse_advert(doc, manifest.hash, [s.sha256 for s in manifest.shards]))


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout} s: {what}")


def _source(manifest: Manifest, files: dict[str, bytes], mode: str) -> tuple[Served, list[asyncio.Transport]]:
    """An in-test holder of every shard: `liar` serves zeros of the right length, `slow` serves the
    first half of the asked range and then holds the connection (until the test kills it)."""
    manifest_hash = manifest.hash
    by_hash = {hashlib.sha256(b).hexdigest(): b for b in files.values()}
    held: list[asyncio.Transport] = []
    order = [s.sha256 for s in manifest.shards]

    async def advert(request: web.Request) -> web.Response:
        return web.json_response(advert_body(manifest_hash, order, set(order)))

    async def shard(request: web.Request) -> web.StreamResponse:
        data = by_hash.get(request.match_info["digest"])
        if data is None:
            return web.Response(status=404)
        if request.match_info["digest"] == manifest_hash:
            return web.Response(body=data)
        if mode == "liar":
            return web.Response(body=bytes(len(data)))
        start = int(re.match(r"bytes=(\d+)-", request.headers.get("Range", "bytes=0-")).group(1))
        headers = {"Content-Length": str(len(data) - start)}
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        response = web.StreamResponse(status=206 if start else 200, headers=headers)
        await response.prepare(request)
        half = len(data) // 2
        if start < half:
            await response.write(data[start:half])
        transport = request.transport
        assert transport is not None
        held.append(transport)  # type: ignore[arg-type]
        while not transport.is_closing():  # hold the connection until the test kills this source
            await asyncio.sleep(0.2)
        return response

    app = web.Application()
    app.router.add_get("/v1/shards", advert)
    app.router.add_get("/v1/shards/{digest}", shard)
    return Served(app), held


def test_peers_fetch_verify_train_and_serve_a_swarm_corpus(corpus, spawn, tmp_path: Path, monkeypatch) -> None:
    for name, value in ENV.items():  # the peers inherit them: adverts read every second, no stall timeout
        monkeypatch.setenv(name, value)
    seed = tmp_path / "seed"
    seed.mkdir()
    for tar in sorted(corpus["train"].glob("*.tar")):
        shutil.copy(tar, seed / tar.name)
    manifest = write_manifest(seed)
    files = {"manifest": manifest.canonical_bytes(), **{s.name: (seed / s.name).read_bytes() for s in manifest.shards}}
    liar, _ = _source(manifest, files, "liar")
    slow, held = _source(manifest, files, "slow")
    a_port, b_port = _free_port(), _free_port()
    a_addr, b_addr = f"127.0.0.1:{a_port}", f"127.0.0.1:{b_port}"
    data = manifest.swarm_id
    try:
        b = spawn("b", *tiny_args(data, tmp_path / "b", "--listen", b_addr, "--no-mdns", "--peer", liar.address,
                                  "--peer", a_addr, steps=100000))
        c = spawn("c", *tiny_args(data, tmp_path / "c", "--listen", "127.0.0.1:0", "--no-mdns", "--peer", slow.address,
                                  "--peer", b_addr, steps=100000))
        b.wait_for(r"refused shard .* do not match the manifest's SHA-256", 240)
        _wait(lambda: len(held) == 1, 240, "C fetching its first shard from the slow source (one at a time until it holds one)")
        a = spawn("a", *tiny_args(data, tmp_path / "a", "--listen", a_addr, "--no-mdns", "--manifest",
                                  str(seed / "swarm-manifest.json"), steps=100000))
        a.wait_listening(240)
        b.wait_listening(240)
        _wait(lambda: _held(b_addr, manifest) == len(manifest.shards), 240, "B holding every shard")
        slow.call(_abort(held))  # the source vanishes mid-transfer
        slow.close()
        c.wait_listening(300)
        c_addr = c.address
        _wait(lambda: _held(c_addr, manifest) == len(manifest.shards), 240, "C holding every shard")
        for p in (b, c):
            p.wait_for(r"^step [1-9]\d* ", 240)
        assert _metric(b_addr, "gossip_tts_shards_refused_total", reason="hash_mismatch") >= 1
        assert _metric(b_addr, "gossip_tts_shards_fetched_total") == len(manifest.shards)
        assert _metric(c_addr, "gossip_tts_data_bytes_received_total") == manifest.total_bytes  # resumed, never refetched
        assert "resuming from the next holder" in c.text()
        assert _metric(b_addr, "gossip_tts_data_bytes_sent_total") > 0  # B served C
        assert _metric(c_addr, "gossip_tts_data_shards_held") == len(manifest.shards)
        for name in files:
            if name != "manifest":
                assert (tmp_path / "c" / "shards" / manifest.hash[:16] / name).read_bytes() == files[name]
    finally:
        liar.close()


def _offering_source(offers: dict[str, tuple[bytes, str, int]], shards: dict[str, bytes]) -> Served:
    """An in-test neighbour offering signed documents (document hash -> (bytes, claimed signer, claimed
    version); the test may add more while it runs) in its advert and serving them and `shards` (hash ->
    bytes) by their hash."""

    async def advert(request: web.Request) -> web.Response:
        return web.json_response({"manifests": [{"hash": "00" * 32, "have": "", "signed": {
            "hash": h, "signer": signer, "version": version}} for h, (_, signer, version) in list(offers.items())]})

    async def serve(request: web.Request) -> web.Response:
        digest = request.match_info["digest"]
        data = offers[digest][0] if digest in offers else shards.get(digest)
        return web.Response(status=404) if data is None else web.Response(body=data)

    app = web.Application()
    app.router.add_get("/v1/shards", advert)
    app.router.add_get("/v1/shards/{digest}", serve)
    return Served(app)


def test_an_empty_peer_trusting_a_key_trains_on_its_newest_corpus_and_refuses_the_rest(corpus, spawn, tmp_path: Path,
                                                                                       monkeypatch) -> None:
    """Peer A serves the corpus under a manifest signed by OWNER (version 2). An attacker offers B,
    which starts empty and trusts OWNER only, a manifest of its own shards signed by its own key
    (claiming OWNER's and a higher version in its advert), and OWNER's older version 1 (a replay,
    one shard). B must refuse the first (counted), skip the second, take version 2 from A, fetch only
    the shards that manifest names, train, and offer the signed manifest on; a version 3 offered
    while B trains is verified and kept for B's next start."""
    for name, value in {**ENV, "GOSSIP_TTS_SWARM_DATA_MANIFEST_CHECK_S": "1"}.items():
        monkeypatch.setenv(name, value)
    owner, attacker = Identity.generate(), Identity.generate()
    seed = tmp_path / "seed"
    seed.mkdir()
    for tar in sorted(corpus["train"].glob("*.tar")):
        shutil.copy(tar, seed / tar.name)
    signed = write_signed_manifest(seed, owner, version=2)
    manifest = signed.manifest
    fake_shard = b"not the corpus" * 1000
    fake = Manifest((ShardEntry("evil.tar", len(fake_shard), hashlib.sha256(fake_shard).hexdigest(), "mel", 4, 10.0, 1, 1.0),))
    forged, replay = sign_manifest(fake, attacker, 1000), sign_manifest(Manifest(manifest.shards[:1]), owner, 1)
    forger = _offering_source({hashlib.sha256(forged).hexdigest(): (forged, owner.peer_id, 1000)},
                              {fake.shards[0].sha256: fake_shard})
    offers = {hashlib.sha256(replay).hexdigest(): (replay, owner.peer_id, 1)}
    replayer = _offering_source(offers, {})
    data = f"swarm-key:{owner.peer_id}"
    try:
        a = spawn("a", *tiny_args(data, tmp_path / "a", "--listen", "127.0.0.1:0", "--no-mdns", "--manifest",
                                  str(seed / SIGNED_MANIFEST_NAME), steps=100000))
        a_addr = a.wait_listening(240)
        b = spawn("b", *tiny_args(data, tmp_path / "b", "--listen", "127.0.0.1:0", "--no-mdns", "--peer", forger.address,
                                  "--peer", replayer.address, "--peer", a_addr, steps=100000))
        b.wait_for(r"manifest version 2 signed by", 240)
        b_addr = b.wait_listening(240)
        _wait(lambda: _held(b_addr, manifest) == len(manifest.shards), 240, "B holding every shard")
        b.wait_for(r"^step [1-9]\d* ", 240)
        assert _metric(b_addr, "gossip_tts_manifests_refused_total", reason="untrusted_signer") == 1
        assert _metric(b_addr, "gossip_tts_data_bytes_received_total") == manifest.total_bytes  # nothing of the fake corpus
        assert not (tmp_path / "b" / "shards" / fake.hash[:16]).exists()
        offered = json.loads(_get(b_addr, "/v1/shards"))["manifests"][0]["signed"]
        assert offered == {"hash": signed.hash, "signer": owner.peer_id, "version": 2}
        assert _get(b_addr, f"/v1/shards/{signed.hash}") == signed.data
        kept = tmp_path / "b" / "shards" / f"signed-{owner.peer_id[:16]}.json"
        assert kept.read_bytes() == signed.data
        newer = sign_manifest(manifest, owner, 3)
        offers[hashlib.sha256(newer).hexdigest()] = (newer, owner.peer_id, 3)  # the forger stays banned: ask the other
        b.wait_for(r"manifest version 3 signed by .* verified and kept", 120)
        assert kept.read_bytes() == newer
        assert _metric(b_addr, "gossip_tts_data_manifest_newest_version") == 3
        assert _metric(b_addr, "gossip_tts_manifests_refused_total", reason="untrusted_signer") == 1  # never fetched again
    finally:
        forger.close()
        replayer.close()


async def _abort(transports: list[asyncio.Transport]) -> None:
    for t in transports:
        t.abort()


RSS_SERVER = """
import sys, time
from pathlib import Path
import peer.net.shard_routes as routes
from peer.shards.config import SwarmDataConfig
from peer.shards.manifest import read_manifest
from peer.shards.store import ShardStore
from tests.unit.shard_server_helpers import serve_store

own, mode = Path(sys.argv[1]), sys.argv[2]
if mode != "sendfile":
    routes.SENDFILE = False
if mode == "whole":
    routes.CHUNK = int(sys.argv[3])
store = ShardStore(read_manifest((own / "swarm-manifest.json").read_bytes()), own.parent / "cache", 1, 0.0, own_dir=own)
store.open()
# Memory, not pace, is measured here; the whole-shard control also lifts the piece cap of the minimum rate.
cfg = SwarmDataConfig(max_upload_mb_s=0, **({"min_upload_kb_s": 0.0} if mode == "whole" else {}))
served, server = serve_store(store, cfg)
print(served.address, flush=True)
time.sleep(600)
"""
BIG = 256 << 20


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _upload_growth(own: Path, digest: str, mode: str) -> int:
    """How much the serving process's peak memory grows while it uploads the big shard once."""
    server = subprocess.Popen([sys.executable, "-c", RSS_SERVER, str(own), mode, str(BIG)], stdout=subprocess.PIPE,
                              cwd=Path(__file__).resolve().parents[2], text=True)
    try:
        assert server.stdout is not None
        address = server.stdout.readline().strip()
        before = _peak_rss(server.pid)
        got = 0
        with urllib.request.urlopen(f"http://{address}/v1/shards/{digest}", timeout=60) as r:
            while block := r.read(1 << 20):
                got += len(block)
        assert got == BIG
        return _peak_rss(server.pid) - before
    finally:
        server.kill()
        server.wait(30)


def _frame_budget(preset: str) -> int:
    """The bytes of frame bodies a peer of `preset` holds in memory at once (RequestGuard.body_budget)."""
    import torch

    from gossip_tts.model import count_parameters, model_config
    from gossip_tts.model.dit import EchoDiT
    from peer.core.node import limits_for
    from peer.net.config import NetConfig

    with torch.device("meta"):
        numel = count_parameters(EchoDiT(model_config(preset)))
    return int(NetConfig().body_budget_frames * limits_for(numel).max_frame_bytes)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads peak memory from /proc")
def test_a_shard_far_larger_than_the_frame_budget_streams_in_bounded_memory(tmp_path: Path) -> None:
    from peer.shards.store import sha256_of

    budget = _frame_budget("small")  # the default preset's: 96 MiB
    assert BIG > 2 * budget
    own = tmp_path / "own"
    own.mkdir()
    with open(own / "big.tar", "wb") as f:
        f.truncate(BIG)  # sparse: 256 MiB of zeros that take no disk
    digest = sha256_of(own / "big.tar")
    manifest = Manifest((ShardEntry("big.tar", BIG, digest, "mel", 4, 10.0, 1, 1.0),))
    (own / "swarm-manifest.json").write_bytes(manifest.canonical_bytes())
    growth = {mode: _upload_growth(own, digest, mode) for mode in ("sendfile", "chunks", "whole")}
    print(f"peak memory growth while uploading {BIG >> 20} MiB (frame budget {budget >> 20} MiB): "
          + ", ".join(f"{mode} {g >> 20} MiB" for mode, g in growth.items()))
    assert growth["sendfile"] < 32 << 20 and growth["chunks"] < 32 << 20
    assert growth["whole"] > 200 << 20  # undefended control: one read of the whole shard
