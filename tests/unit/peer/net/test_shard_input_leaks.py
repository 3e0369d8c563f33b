"""Per-address bookkeeping of the server holds only addresses with a request open.

A request refused before it opened (a second /v1/state within `state_every_s`, an upload
refused because all slots are busy) must leave no entry behind, or addresses, of which an
attacker has plenty, grow the map for good (`peer/net/http_guard.py`, `peer/net/shard_routes.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from peer.net.http_guard import RequestGuard
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.shard_routes import ShardServer
from peer.shards.config import SwarmDataConfig
from tests.unit.shard_server_helpers import own_store

ADDRESSES = 500


def _from(remote: str, path: str, **kwargs) -> web.Request:
    return make_mocked_request("GET", path, **kwargs).clone(remote=remote)


def test_refused_state_requests_leave_no_entry_per_address() -> None:
    metrics = Metrics(process=False)
    guard = RequestGuard(NetConfig(), metrics, max_body_bytes=1 << 20)

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="state")

    async def main() -> list[int]:
        statuses = []
        for i in range(ADDRESSES):
            remote = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
            for _ in range(2):  # the second one within state_every_s is refused
                statuses.append((await guard.check(_from(remote, "/v1/state"), handler)).status)
        return statuses

    statuses = asyncio.run(main())
    assert statuses.count(429) == ADDRESSES and statuses.count(200) == ADDRESSES
    assert metrics.get("http_refused_total", reason="state_rate") == ADDRESSES
    assert len(guard._open) == 0, f"{len(guard._open)} entries left for addresses with nothing open"


def test_refused_uploads_leave_no_entry_per_address(tmp_path: Path) -> None:
    blob = b"shard bytes" * 100
    digest = hashlib.sha256(blob).hexdigest()
    metrics = Metrics(process=False)
    server = ShardServer(own_store(tmp_path, {"a.tar": blob}), SwarmDataConfig(max_uploads=1), metrics)
    server.uploads = 1  # every slot busy: each asker is told 503

    async def main() -> list[int]:
        return [(await server.serve(_from(f"10.0.{i >> 8 & 255}.{i & 255}", f"/v1/shards/{digest}",
                                          match_info={"digest": digest}))).status for i in range(ADDRESSES)]

    assert asyncio.run(main()) == [503] * ADDRESSES
    assert metrics.get("http_refused_total", reason="shard_uploads_busy") == ADDRESSES
    assert len(server._open) == 0, f"{len(server._open)} entries left for addresses with nothing open"
