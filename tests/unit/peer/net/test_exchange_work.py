"""Every exchange is rationed by the work it can cause, ticketed or not, per key and per address
(NetConfig.key_work_per_s, address_work_per_s; `peer.core.ingest.exchange_work`).

An answer hands out a fresh ticket, so one first contact bought an unrationed chain of ticketed
exchanges, each verified and decoded: a pre-signed snapshot replayed from one address with four
keys was applied over a thousand times in half a minute. Now a key past its budget gets 429
before the node sees its exchange, and an address past its budget before its body is read; a
partner exchanging at an honest pace is never refused, and naming another's key spends none of
its budget."""

from __future__ import annotations

import asyncio

import torch
from aiohttp import ClientSession, TCPConnector, web
from aiohttp.test_utils import TestServer

from peer.core.ingest import CONTROL_WORK, exchange_work
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.http_guard import BODY_KEY, TICKETED_KEY, RequestGuard
from protocol import Identity, Limits, make_snapshot_frame, make_update_frame, pack_bundle

N = 4096
MODEL_BYTES = 4 * N
LIMITS = Limits(max_frame_bytes=1 << 20, max_decompressed_bytes=1 << 20)


def frame(identity: Identity, *, snapshot: bool = False, seq: int = 1) -> bytes:
    kw = dict(swarm="t", fingerprint="f" * 64, seq=seq, step=0, timestamp=0.0, extra={"epoch": 1})
    if snapshot:
        return make_snapshot_frame(identity, vector=torch.randn(N), **kw)
    delta = torch.zeros(N)
    delta[seq % N] = 1.0
    return make_update_frame(identity, codec="topk:0.01+int8", delta=delta, **kw)[0]


def body(identity: Identity, frames: int = 1, *, snapshot: bool = False) -> bytes:
    """A bundle as `identity` sends it: its control frame (any frame of its key stands in: the guard
    reads only the framing), then `frames` frames."""
    return pack_bundle([frame(identity, seq=0)] + [frame(identity, snapshot=snapshot, seq=i + 1) for i in range(frames)])


def guard() -> tuple[RequestGuard, list[float]]:
    clock = [0.0]
    cfg = NetConfig(key_work_per_s=4.0, key_work_burst=8.0, address_work_per_s=8.0, address_work_burst=16.0)
    return RequestGuard(cfg, Metrics(process=False), 1 << 20, lambda: clock[0], model_bytes=MODEL_BYTES), clock


def send(g: RequestGuard, remote: str, data: bytes, n: int = 1, *, verified: bool = True) -> tuple[list[int], int]:
    """(statuses, how many reached the handler) of `n` exchanges with body `data` from `remote` (a
    127.x.y.z address) through a server guarded by `g`; `verified`: the node verified the control
    frame (else it answers 400)."""
    reached = [0]

    async def handler(request: web.Request) -> web.Response:
        reached[0] += 1
        assert bytes(request[BODY_KEY]) == data
        request[TICKETED_KEY] = True
        return web.Response(body=b"answer", status=200 if verified else 400)

    async def main() -> list[int]:
        app = web.Application(middlewares=[g.middleware()])
        app.router.add_post("/v1/exchange", handler)
        async with TestServer(app, host="127.0.0.1") as server:
            async with ClientSession(connector=TCPConnector(local_addr=(remote, 0), force_close=True)) as client:
                statuses = []
                for _ in range(n):
                    async with client.post(server.make_url("/v1/exchange"), data=data) as response:
                        statuses.append(response.status)
                return statuses

    return asyncio.run(main()), reached[0]


def test_work_grows_with_the_frames_and_their_bytes() -> None:
    me = Identity.generate(b"\x01" * 32)
    key, empty = exchange_work(body(me, 0), MODEL_BYTES, LIMITS)
    assert key == me.public_key and empty == CONTROL_WORK
    update = exchange_work(body(me, 1), MODEL_BYTES, LIMITS)[1]
    snapshot = exchange_work(body(me, 1, snapshot=True), MODEL_BYTES, LIMITS)[1]
    gap_fill = exchange_work(body(me, 32), MODEL_BYTES, LIMITS)[1]
    assert empty < update < 1.5 < 3.5 < snapshot and gap_fill > 32
    assert exchange_work(b"not a bundle", MODEL_BYTES, LIMITS) == (b"", CONTROL_WORK)


def test_a_key_replaying_ticketed_snapshots_is_refused_before_the_node_sees_it() -> None:
    g, clock = guard()
    attacker = Identity.generate(b"\x02" * 32)
    statuses, reached = send(g, "127.0.0.11", body(attacker, 1, snapshot=True), 20)
    assert reached <= 3 and statuses.count(429) == 20 - reached  # burst 8 buys two snapshots, and a debt
    assert g.metrics.get("http_refused_total", reason="key_work") == 20 - reached
    clock[0] = 60.0  # paid back at its rate: one more passes
    assert send(g, "127.0.0.11", body(attacker, 1, snapshot=True))[0] == [200]
    honest = Identity.generate(b"\x03" * 32)  # another key, another address: not held back
    assert send(g, "127.0.0.12", body(honest, 1)) == ([200], 1)


def test_fresh_keys_from_one_address_are_refused_before_their_body_is_read() -> None:
    g, _ = guard()
    reached = 0
    for i in range(40):
        reached += send(g, "127.0.0.11", body(Identity.generate(bytes([10 + i]) * 32), 1, snapshot=True))[1]
    assert reached <= 5  # burst 16 at about 4 a snapshot exchange
    assert g.metrics.get("http_refused_total", reason="address_work") == 40 - reached


def test_a_partner_at_an_honest_pace_is_never_refused() -> None:
    g, clock = guard()
    partner = Identity.generate(b"\x04" * 32)
    statuses = []
    for t in range(240):  # two exchanges a second, one update each, for two minutes
        clock[0] = t / 2
        statuses += send(g, "127.0.0.11", body(partner, 1))[0]
    assert statuses == [200] * 240


def test_naming_another_key_spends_none_of_its_budget() -> None:
    g, _ = guard()
    victim = Identity.generate(b"\x05" * 32)
    forged = body(victim, 1, snapshot=True)  # the victim's key in the prefix; the node refuses it (400)
    for i in range(20):
        send(g, f"127.0.1.{i + 1}", forged, verified=False)
    assert send(g, "127.0.0.19", body(victim, 1, snapshot=True)) == ([200], 1)
