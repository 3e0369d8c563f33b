"""Exchanges that spend no ticket of ours are rationed per address (NetConfig.stranger_exchanges_per_s).

A first contact costs the node a signature check and a signed ticket; the flood of them seen in
the snapshot-leech attack (100 a second from one address or eight) took CPU from training. Past
its burst, an address's exchanges are refused (429) before their body is read or the node sees
them, until its bucket refills; ticketed exchanges (a neighbour we already talked with) spend no
stranger token (their work is rationed apart: tests/unit/peer/net/test_exchange_work.py).
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.http_guard import TICKETED_KEY, RequestGuard

RATE, BURST = 2.0, 5  # not the defaults: small numbers to count exactly


def _guard(**overrides) -> tuple[RequestGuard, Metrics, list[float]]:
    metrics, clock = Metrics(process=False), [0.0]
    cfg = NetConfig(**{"stranger_exchanges_per_s": RATE, "stranger_exchange_burst": BURST,
                       "key_work_per_s": float("inf"), "address_work_per_s": float("inf"), **overrides})
    return RequestGuard(cfg, metrics, max_body_bytes=1 << 20, clock=lambda: clock[0]), metrics, clock


def _exchanges(guard: RequestGuard, remote: str, n: int, *, ticketed: bool) -> tuple[list[int], int]:
    """(statuses, how many reached the handler) of `n` exchanges from `remote`."""
    reached = [0]

    async def handler(request: web.Request) -> web.Response:
        reached[0] += 1
        request[TICKETED_KEY] = ticketed  # what the exchange handler learns from the node
        return web.Response(body=b"answer")

    async def main() -> list[int]:
        return [(await guard.check(make_mocked_request("POST", "/v1/exchange").clone(remote=remote), handler)).status
                for _ in range(n)]

    return asyncio.run(main()), reached[0]


def test_past_its_burst_an_address_is_refused_before_the_node_sees_it_until_it_refills() -> None:
    guard, metrics, clock = _guard()
    statuses, reached = _exchanges(guard, "10.0.0.1", 20, ticketed=False)
    assert statuses == [200] * BURST + [429] * (20 - BURST) and reached == BURST
    assert metrics.get("http_refused_total", reason="stranger_rate") == 20 - BURST
    assert _exchanges(guard, "10.0.0.2", 1, ticketed=False) == ([200], 1)  # another address is not held back
    clock[0] = 1.0  # two tokens back at 2 a second
    assert _exchanges(guard, "10.0.0.1", 3, ticketed=False) == ([200, 200, 429], 2)


def test_ticketed_exchanges_spend_no_stranger_token() -> None:
    guard, metrics, _ = _guard()
    assert _exchanges(guard, "10.0.0.1", 100, ticketed=True) == ([200] * 100, 100)
    assert metrics.get("http_refused_total", reason="stranger_rate") == 0


def test_the_control_without_the_limit_lets_every_stranger_through() -> None:
    guard, metrics, _ = _guard(stranger_exchanges_per_s=float("inf"))
    assert _exchanges(guard, "10.0.0.1", 100, ticketed=False) == ([200] * 100, 100)


def test_other_paths_are_not_charged() -> None:
    guard, _, _ = _guard()

    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def main() -> list[int]:
        return [(await guard.check(make_mocked_request("GET", "/v1/hello").clone(remote="10.0.0.1"), handler)).status
                for _ in range(50)]

    assert asyncio.run(main()) == [200] * 50
    assert _exchanges(guard, "10.0.0.1", BURST, ticketed=False) == ([200] * BURST, BURST)
