"""A request body's deadline moves on with the bytes that arrive: a pushed snapshot the model's
size may take longer than `body_read_timeout_s` as long as it keeps the floor rate; one that drips
slower than the floor is cut (408) however little it has sent, and so is one that sends fast and
then stalls past the grace: what it sent early buys no more than `body_read_timeout_s` ahead
(peer/net/http_guard.py)."""

from __future__ import annotations

import asyncio
import math

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.http_guard import BODY_KEY, RequestGuard

PIECES, PIECE, GAP_S = 8, 50_000, 0.1  # 400 kB over ~0.8 s: about 500 kB/s


async def _post_slowly(min_body_rate: float, pieces: list[tuple[float, int]] | None = None) -> int:
    """POST `pieces` ((seconds to wait, then bytes to send), each), by default PIECES of PIECE
    bytes GAP_S apart; the answer's status."""
    pieces = pieces if pieces is not None else [(GAP_S, PIECE)] * PIECES
    cfg = NetConfig(body_read_timeout_s=0.3, key_work_per_s=math.inf, address_work_per_s=math.inf,
                    stranger_exchanges_per_s=math.inf)
    guard = RequestGuard(cfg, Metrics(process=False), max_body_bytes=1 << 22, min_body_rate=min_body_rate)

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=str(len(request[BODY_KEY])))

    app = web.Application(middlewares=[guard.middleware()])
    app.router.add_post("/v1/anything", handler)

    async def body():
        for gap_s, size in pieces:
            await asyncio.sleep(gap_s)
            yield b"\x01" * size

    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/v1/anything", data=body())
        if resp.status == 200:
            assert await resp.text() == str(sum(size for _, size in pieces))
        return resp.status


@pytest.mark.parametrize("rate, status", [(200_000.0, 200), (math.inf, 408), (5_000_000.0, 408)])
def test_a_body_slower_than_the_fixed_deadline_is_read_while_it_keeps_the_floor_rate(rate: float, status: int):
    """200 kB/s floor: 0.3 s + what arrived / 200 kB/s stays ahead of a 500 kB/s body; the fixed
    0.3 s (inf) and a 5 MB/s floor both cut it."""
    assert asyncio.run(_post_slowly(rate)) == status


@pytest.mark.parametrize("stall_s, status", [(0.05, 200), (1.0, 408)])
def test_a_fast_start_buys_no_stall_past_the_grace(stall_s: float, status: int):
    """400 kB at once would buy 2 s at a 200 kB/s floor; the credit is capped at the 0.3 s grace,
    so a 1 s stall before the last piece is cut, a 0.05 s one is not."""
    assert asyncio.run(_post_slowly(200_000.0, [(0.0, 400_000), (stall_s, PIECE)])) == status
