"""A corpus shared by the swarm: real peer processes on 127.0.0.1 with --data swarm:HASH.

Peer A holds the shards (beside its --manifest); B and C start with none. B is also given a
liar (a server advertising every shard and serving the right number of wrong bytes) and must
refuse it, then fetch from A once A is up. C's only holder at first is a slow source that
sends half of each shard and then holds the connection; once B holds the corpus the slow
source is killed, and C must resume both transfers at B from where they stopped: every
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

from gossip_tts.swarm_manifest import write_manifest
from peer.shards.advert import advert_body, parse_advert
from peer.shards.manifest import Manifest
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
        _wait(lambda: len(held) == 2, 240, "C fetching two shards from the slow source")
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


async def _abort(transports: list[asyncio.Transport]) -> None:
    for t in transports:
        t.abort()


RSS_SERVER = """
import sys, time
from pathlib import Path
import peer.shard_routes as routes
from peer.shards.manifest import read_manifest
from peer.shards.store import ShardStore
from tests.unit.shard_server_helpers import serve_store

own, chunk = Path(sys.argv[1]), int(sys.argv[2])
if chunk:
    routes.CHUNK = chunk
store = ShardStore(read_manifest((own / "swarm-manifest.json").read_bytes()), own.parent / "cache", 1, 0.0, own_dir=own)
store.open()
served, _ = serve_store(store)
print(served.address, flush=True)
time.sleep(600)
"""
BIG = 256 << 20


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _upload_growth(own: Path, digest: str, chunk: int) -> int:
    """How much the serving process's peak memory grows while it uploads the big shard once."""
    server = subprocess.Popen([sys.executable, "-c", RSS_SERVER, str(own), str(chunk)], stdout=subprocess.PIPE,
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


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads peak memory from /proc")
def test_a_shard_far_larger_than_the_frame_budget_streams_in_bounded_memory(tmp_path: Path) -> None:
    from peer.shards.manifest import Manifest, ShardEntry
    from peer.shards.store import sha256_of

    own = tmp_path / "own"
    own.mkdir()
    with open(own / "big.tar", "wb") as f:
        f.truncate(BIG)  # sparse: 256 MiB of zeros that take no disk
    digest = sha256_of(own / "big.tar")
    manifest = Manifest((ShardEntry("big.tar", BIG, digest, "mel", 4, 10.0, 1, 1.0),))
    (own / "swarm-manifest.json").write_bytes(manifest.canonical_bytes())
    bounded = _upload_growth(own, digest, 0)
    whole = _upload_growth(own, digest, BIG)  # undefended control: one read of the whole shard
    print(f"peak memory growth while uploading {BIG >> 20} MiB: {bounded >> 20} MiB in chunks, {whole >> 20} MiB whole")
    assert bounded < 32 << 20
    assert whole > 200 << 20
