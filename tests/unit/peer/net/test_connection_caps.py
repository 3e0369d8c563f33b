"""Connections are capped per address as well as in all, with a reserve for fresh addresses
(`peer.net.connection_caps`; NetConfig.max_connections_per_address, reserved_connections).

With one global cap, 128 idle sockets from one address, reopened as they closed, kept every new
honest connection out: the status page, `gossip-tts status` and newcomers. Now one address holds
at most its share, and an address that holds nothing still gets in when many addresses fill the
rest."""

from __future__ import annotations

import asyncio

from aiohttp import web

from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.connection_caps import CappedSite, ConnectionCaps
from tests.unit.guarded_server_helpers import ask


def test_one_address_holds_at_most_its_share_and_a_fresh_one_gets_the_reserve() -> None:
    caps = ConnectionCaps(max_connections=8, per_address=3, reserved=2)
    assert [caps.admit("a") for _ in range(5)] == [True] * 3 + [False] * 2
    assert all(caps.admit(x) for x in ("b", "b", "b", "c", "c"))  # 8 held: the cap in all
    assert not caps.admit("c")  # holds some already: no reserve for it
    assert caps.admit("d") and caps.admit("e") and not caps.admit("f")  # the reserve, one each, then full
    caps.release("a")
    assert not caps.admit("a")  # the rest is full, and the reserve is not for an address holding some
    for _ in range(3):
        caps.release("b")
    assert "b" not in caps.open and caps.total == 6
    assert caps.admit("a") and not caps.admit("a")


def _serve_and_flood(cfg: NetConfig, flood: dict[str, int], honest: list[str]) -> tuple[list[int], int]:
    """Serve GET /metrics on 127.0.0.1 with `cfg`'s caps; hold `flood` (source address -> idle
    sockets) open, then ask once from each `honest` address: (its answers' status, 0 when not
    served; how many flood sockets the server still held)."""

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def main() -> tuple[list[int], int]:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, keepalive_timeout=30)
        await runner.setup()
        site = CappedSite(runner, "127.0.0.1", 0, cfg=cfg, metrics=Metrics(process=False))
        await site.start()
        port = site._bound_port
        loop = asyncio.get_running_loop()
        held = []
        for source, count in flood.items():
            for _ in range(count):
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line that ends it
                held.append((reader, writer))
        await asyncio.sleep(0.3)
        statuses = []
        for source in honest:
            statuses.append(await loop.run_in_executor(None, ask, "127.0.0.1", port, source, b"GET /metrics"))
        still_open = sum(not r.at_eof() for r, _ in held)
        for _, w in held:
            w.close()
        await runner.cleanup()
        return statuses, still_open

    return asyncio.run(main())


def test_128_idle_sockets_from_one_address_leave_others_served() -> None:
    statuses, held = _serve_and_flood(NetConfig(), {"127.0.0.5": 128}, [f"127.0.0.{i}" for i in range(10, 16)])
    assert statuses == [200] * 6
    assert held == NetConfig().max_connections_per_address


def test_a_fresh_address_gets_in_when_many_addresses_fill_the_rest() -> None:
    cfg = NetConfig(max_connections=32, max_connections_per_address=8, reserved_connections=2)
    flood = {f"127.0.1.{i}": 10 for i in range(1, 5)}  # 40 wanted, 32 held
    statuses, held = _serve_and_flood(cfg, flood, ["127.0.2.1", "127.0.2.2"])
    assert held == 32 and statuses == [200, 200]
