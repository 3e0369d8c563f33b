"""Per-address budgets key an IPv6 address by its /64 (`peer.core.budget_key`).

One IPv6 host is commonly handed a whole /64, so budgets kept per raw address gave it 2^64 of
each: a flood spread over one /64, a fresh address per request, was never refused or benched,
held the open-request, state and shard-upload caps once per address, and drew one snapshot per
address from our answers. Each test spreads its requests over one /64, and its control over as
many /64s, which still get a budget each."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

import peer.net.shard_routes as routes
from peer.core.budget_key import budget_key
from peer.core.snapshots import AnswerBudget
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.http_app import PeerRoutes
from peer.net.http_guard import BODY_KEY, TICKETED_KEY, RequestGuard
from peer.net.refusal_bench import RefusalBench
from peer.shards.config import SwarmDataConfig
from tests.unit.shard_server_helpers import held_writer, own_store

BURST = 4


def one_64(n: int) -> list[str]:
    """`n` addresses of one /64."""
    return [f"2001:db8:1:2:{i:x}::{i:x}" for i in range(1, n + 1)]


def many_64s(n: int) -> list[str]:
    """`n` addresses, each of its own /64, in /48s of their own (test_ipv6_blocks: /64s of one /48
    share its budgets too)."""
    return [f"2001:db8:{i:x}::1" for i in range(1, n + 1)]


def guard(bench: RefusalBench | None = None, **cfg: float) -> RequestGuard:
    net = NetConfig(**{"stranger_exchanges_per_s": 1.0, "stranger_exchange_burst": BURST, "key_work_per_s": float("inf"),
                       "address_work_per_s": float("inf"), **cfg})
    return RequestGuard(net, Metrics(process=False), 1 << 20, clock=lambda: 0.0, bench=bench)


async def ask(g: RequestGuard, method: str, path: str, remote: str, handler=None) -> int:
    async def answer(request: web.Request) -> web.Response:
        request[TICKETED_KEY] = False  # a stranger's exchange
        return web.Response(text="ok")

    return (await g.check(make_mocked_request(method, path).clone(remote=remote), handler or answer)).status


def statuses(g: RequestGuard, method: str, path: str, remotes: list[str]) -> list[int]:
    async def main() -> list[int]:
        return [await ask(g, method, path, r) for r in remotes]

    return asyncio.run(main())


@pytest.mark.parametrize("spread, refused", [(one_64, 16), (many_64s, 0)], ids=["one /64", "control: 20 /64s"])
def test_strangers_spread_over_one_64_share_its_exchange_budget(spread, refused: int) -> None:
    got = statuses(guard(), "POST", "/v1/exchange", spread(20))
    assert got.count(429) == refused and got[:BURST] == [200] * BURST


@pytest.mark.parametrize("spread, refused", [(one_64, 4), (many_64s, 0)], ids=["one /64", "control: 5 /64s"])
def test_full_states_are_rationed_per_64(spread, refused: int) -> None:
    assert statuses(guard(), "GET", "/v1/state", spread(5)).count(429) == refused


def test_a_flood_spread_over_one_64_benches_every_address_in_it() -> None:
    bench = RefusalBench(1.0, 6, clock=lambda: 0.0)
    statuses(guard(bench), "POST", "/v1/exchange", one_64(20))  # 4 answered, 16 refused: past a burst of 6
    assert bench.benched(budget_key("2001:db8:1:2:ffff::1"))  # one never heard from, in that /64
    assert not bench.benched(budget_key("2001:db8:1:3::1"))  # the next /64 is not
    control = RefusalBench(1.0, 6, clock=lambda: 0.0)
    statuses(guard(control), "POST", "/v1/exchange", many_64s(20))
    assert not any(control.benched(budget_key(a)) for a in many_64s(20))


@pytest.mark.parametrize("spread, third", [(one_64, 429), (many_64s, 200)], ids=["one /64", "control: 3 /64s"])
def test_open_requests_are_counted_per_64(spread, third: int) -> None:
    g = guard(max_requests_per_address=2)

    async def main() -> int:
        release = asyncio.Event()

        async def held(request: web.Request) -> web.Response:
            await release.wait()
            return web.Response(text="ok")

        a, b, c = spread(3)
        open_ = [asyncio.create_task(ask(g, "GET", "/v1/hello", r, held)) for r in (a, b)]
        await asyncio.sleep(0.01)
        status = await asyncio.wait_for(ask(g, "GET", "/v1/hello", c), 1.0)
        release.set()
        assert await asyncio.gather(*open_) == [200, 200]
        return status

    assert asyncio.run(main()) == third


class SnapshotFace:
    """The face's exchange answer, reduced to what it asks of the snapshot budget for the address it is given."""

    accepting = True

    def __init__(self) -> None:
        self.budget = AnswerBudget(every_s=10.0, per_min=60.0, burst=8, now=0.0)
        self.withheld: list[str | None] = []

    async def serve_exchange(self, body: bytes | bytearray, address: str) -> tuple[bytes, bool]:
        self.withheld.append(self.budget.withheld(b"k", ticketed=True, verified={b"k"}, address=address, now=0.0))
        return b"answer", True


@pytest.mark.parametrize("spread, withheld", [(one_64, 3), (many_64s, 0)], ids=["one /64", "control: 4 /64s"])
def test_snapshots_in_answers_are_rationed_per_64(spread, withheld: int) -> None:
    face = SnapshotFace()
    exchanges = PeerRoutes(face, Metrics(process=False), lambda n: 1.0)  # type: ignore[arg-type]

    async def main() -> None:
        for remote in spread(4):
            request = make_mocked_request("POST", "/v1/exchange").clone(remote=remote)
            request[BODY_KEY] = bytearray(b"bundle")
            assert (await exchanges.exchange(request)).status == 200

    asyncio.run(main())
    assert face.withheld.count("address_budget") == withheld


@pytest.mark.parametrize("spread, second", [(one_64, 429), (many_64s, None)], ids=["one /64", "control: 2 /64s"])
def test_shard_uploads_are_capped_per_64(tmp_path, monkeypatch, spread, second: int | None) -> None:
    monkeypatch.setattr(routes, "SENDFILE", False)  # written piece by piece, into a writer that holds the first
    blob = bytes(range(256)) * 64
    store = own_store(tmp_path, {"a.tar": blob})
    digest = store.manifest.shards[0].sha256
    server = routes.ShardServer(store, SwarmDataConfig(max_uploads_per_address=1), Metrics(process=False))

    async def main() -> int | None:
        writer, release = held_writer()
        requests = [make_mocked_request("GET", f"/v1/shards/{digest}", match_info={"digest": digest},
                                        writer=writer).clone(remote=r) for r in spread(2)]
        first = asyncio.create_task(server.serve(requests[0]))
        await asyncio.sleep(0.05)
        assert server.uploads == 1
        try:  # refused at once, or held like the first
            status: int | None = (await asyncio.wait_for(server.serve(requests[1]), 0.5)).status
        except asyncio.TimeoutError:
            status = None
        release.set()
        await first
        return status

    assert asyncio.run(main()) == second
