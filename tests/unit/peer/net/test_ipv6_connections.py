"""Connections over real IPv6 sockets are capped and benched by their /64 (`peer.net.connection_caps`,
`peer.core.budget_key`).

Only ::1 exists on a test machine, so another address of its /64 (::/64) is named where the
bench or the caps are told of it, and the connection comes from ::1: refused requests of ::2
bench ::1 too, and ::1's connections count against the /64. A control benches another /64.
tests/unit/peer/net/test_ipv6_namespace.py floods from many addresses of one /64, where it can."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web

from peer.core.budget_key import budget_key
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.connection_caps import CappedSite
from peer.net.refusal_bench import RefusalBench


def _loopback_v6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _loopback_v6(), reason="no IPv6 loopback (::1) to listen on")
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"


def bench_of(refused_by: str) -> RefusalBench:
    """A bench that has benched `refused_by`'s budget key."""
    bench = RefusalBench(1.0, 2, clock=lambda: 0.0)
    for _ in range(3):
        bench.refused(budget_key(refused_by))
    return bench


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter] | None


async def connect(port: int) -> Connection:
    """A connection from ::1, or None when it was reset as it was made."""
    try:
        return await asyncio.open_connection("::1", port)
    except OSError:
        return None


async def status_of(connection: Connection) -> int:
    """Send one request on an open connection: its answer's status, 0 when closed unanswered."""
    if connection is None:
        return 0
    reader, writer = connection
    try:
        writer.write(REQUEST)
        line = await asyncio.wait_for(reader.readline(), 5)
        while (await asyncio.wait_for(reader.readline(), 5)).strip():
            pass
        await reader.readexactly(2)  # "ok"
        return int(line.split()[1]) if line else 0
    except (OSError, asyncio.IncompleteReadError):
        return 0


def serve(bench: RefusalBench, bench_after: str | None = None) -> tuple[list[int], dict[str, int], int]:
    """Serve GET /metrics on [::1] behind a capped site and `bench`; from ::1, ask twice on one kept-alive
    connection (after the first, `bench_after`'s key is benched too), hold it, then ask on a new one.
    (The three statuses, the site's open connections by key while held, connections_benched_total.)"""
    metrics = Metrics(process=False)

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def main() -> tuple[list[int], dict[str, int]]:
        app = web.Application()
        app.router.add_get("/metrics", page)
        runner = web.AppRunner(app, lingering_time=0)
        await runner.setup()
        site = CappedSite(runner, "::1", 0, cfg=NetConfig(), metrics=metrics, bench=bench)
        await site.start()
        kept = await connect(site._bound_port)
        statuses = [await status_of(kept)]
        held = dict(site.caps.open)
        if bench_after is not None:
            for _ in range(3):
                bench.refused(budget_key(bench_after))
        statuses.append(await status_of(kept))
        if kept is not None:
            kept[1].close()
        statuses.append(await status_of(await connect(site._bound_port)))
        await runner.cleanup()
        return statuses, held

    statuses, held = asyncio.run(main())
    return statuses, held, metrics.get("connections_benched_total")


def test_a_connection_counts_against_its_64() -> None:
    statuses, held, benched = serve(bench_of("2001:db8::1"))
    assert held == {"::/64": 1} and statuses == [200, 200, 200] and benched == 0


def test_refusals_of_another_address_in_its_64_bench_a_kept_alive_connection_and_new_ones() -> None:
    statuses, _, benched = serve(bench_of("2001:db8::1"), bench_after="::2")
    assert statuses == [200, 0, 0] and benched >= 2
    control = serve(bench_of("2001:db8::1"), bench_after="2001:db8::2")  # another /64 benched: ::1 is served
    assert control[0] == [200, 200, 200] and control[2] == 0


def test_a_benched_64_is_turned_away_as_it_connects() -> None:
    statuses, held, benched = serve(bench_of("::2"))
    assert statuses == [0, 0, 0] and held == {} and benched >= 2
