"""The /64s of one IPv6 /48 share budgets beside their own (`peer.core.budget_key.Blocks`;
NetConfig.ipv6_block_prefix, ipv6_block_share).

One site is commonly given a /48, 65,536 /64s, and every /64 had budgets of its own: a flood
spread over 64 /64s of one /48 got 64 /64s' refusals before it was benched, 64 stranger
exchanges, 64 addresses' work and open requests, every connection slot and the reserve, every
shard upload slot, and 64 snapshots in answers at once. Now the /48 gets `share` (4) /64s' worth
of each. Each test floods from /64s of one /48 (64, fewer where there are fewer slots); its
control from as many /64s in as many /48s, which still get a budget each; and a /64 of another
/48 keeps its own whole budget beside the flood."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

import peer.net.shard_routes as routes
from peer.core.budget_key import Blocks, budget_key
from peer.core.snapshots import AnswerBudget
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.connection_caps import ConnectionCaps
from peer.net.http_guard import TICKETED_KEY, RequestGuard
from peer.net.refusal_bench import RefusalBench
from peer.shards.config import SwarmDataConfig
from tests.unit.shard_server_helpers import held_writer, own_store

SHARE = 4
BLOCKS = Blocks(48, SHARE)
FLOOD = 64
ONE_48 = [budget_key(f"2001:db8:1:{i:x}::1") for i in range(FLOOD)]
"""64 /64s of 2001:db8:1::/48."""
MANY_48S = [budget_key(f"2001:db8:{0x100 + i:x}::1") for i in range(FLOOD)]
"""64 /64s, each in a /48 of its own."""
FRESH = budget_key("2001:db8:1:ffff::1")
"""A /64 of the flooded /48 that sent nothing itself."""
HONEST = budget_key("2001:db8:ffff:1::1")
"""A /64 of another /48."""
RATE, BURST = 1.0, 6


def refused_until_benched(bench: RefusalBench, sources: list[str], rounds: int = 50) -> int:
    """Refusals `sources` collect at one instant, each refused again while it is not benched."""
    count = 0
    for _ in range(rounds):
        for source in sources:
            if not bench.benched(source):
                bench.refused(source)
                count += 1
    return count


@pytest.mark.parametrize("sources, refusals", [(ONE_48, SHARE * BURST), (MANY_48S, FLOOD * BURST)],
                         ids=["one /48", "control: 64 /48s"])
def test_refusals_of_64_slash64s_of_one_48_are_held_to_its_budget(sources: list[str], refusals: int) -> None:
    bench = RefusalBench(RATE, BURST, clock=lambda: 0.0, blocks=BLOCKS)
    assert refused_until_benched(bench, sources) == refusals
    assert bench.benched(FRESH) == (sources is ONE_48)  # the rest of the /48 is benched with it
    assert refused_until_benched(bench, [HONEST]) == BURST  # another /48's /64: its own whole burst


def test_past_the_strikes_of_its_48_a_flood_is_benched_as_one_address_once_the_budget_in_all_is_spent() -> None:
    """A refusal a second from each /64, within its own rate, over a minute, beside a budget in all
    of 2 a second: each /64's own strikes (3) once, or the /48's (12)."""

    def answered(sources: list[str]) -> int:
        clock = [0.0]
        bench = RefusalBench(RATE, BURST, clock=lambda: clock[0], in_all_per_s=2.0, strikes=3, blocks=BLOCKS)
        count = 0
        for second in range(60):
            clock[0] = float(second)
            for source in sources:
                if not bench.benched(source):
                    bench.refused(source)
                    count += 1
        assert not bench.benched(HONEST)
        return count

    one, control = answered(ONE_48), answered(MANY_48S)  # 62 and 926
    assert control >= 3 * FLOOD and one * 10 <= control, (one, control)


def guard(**cfg: float) -> RequestGuard:
    net = NetConfig(**{"stranger_exchanges_per_s": 1.0, "stranger_exchange_burst": 2, "key_work_per_s": float("inf"),
                       "address_work_per_s": float("inf"), "ipv6_block_prefix": 48, "ipv6_block_share": SHARE,
                       **cfg})
    return RequestGuard(net, Metrics(process=False), 1 << 20, clock=lambda: 0.0)


async def ask(g: RequestGuard, remote: str, ticketed: bool, hold: asyncio.Event | None = None) -> int:
    """One bodyless POST /v1/exchange from `remote` (an address of that budget key): its status."""

    async def answer(request: web.Request) -> web.Response:
        request[TICKETED_KEY] = ticketed
        if hold is not None:
            await hold.wait()
        return web.Response(text="ok")

    address = remote.partition("/")[0] + "1"  # "2001:db8:1:2::/64" -> 2001:db8:1:2::1
    return (await g.check(make_mocked_request("POST", "/v1/exchange").clone(remote=address), answer)).status


def answered(g: RequestGuard, sources: list[str], ticketed: bool = False) -> int:
    async def main() -> int:
        return [await ask(g, s, ticketed) for s in sources].count(200)

    return asyncio.run(main())


@pytest.mark.parametrize("sources, served", [(ONE_48, SHARE * 2), (MANY_48S, FLOOD * 2)],
                         ids=["one /48", "control: 64 /48s"])
def test_stranger_exchanges_of_one_48_are_held_to_its_budget(sources: list[str], served: int) -> None:
    g = guard()
    assert answered(g, sources * 2) == served  # each /64 asks twice: its own burst of 2
    assert answered(g, [HONEST] * 3) == 2


@pytest.mark.parametrize("sources, served", [(ONE_48, 13), (MANY_48S, FLOOD)], ids=["one /48", "control: 64 /48s"])
def test_the_work_of_one_48_is_held_to_its_budget(sources: list[str], served: int) -> None:
    """A bodyless exchange costs 0.25 of an update's work; a /64 has 1 (one exchange), its /48 4:
    13 exchanges, down to its last whole token."""
    g = guard(stranger_exchanges_per_s=float("inf"), address_work_per_s=1.0, address_work_burst=1.0)
    assert answered(g, sources, ticketed=True) == served
    assert answered(g, [HONEST] * 2, ticketed=True) == 1


@pytest.mark.parametrize("sources, served", [(ONE_48, SHARE), (MANY_48S, 8)], ids=["one /48", "control: 8 /48s"])
def test_open_requests_of_one_48_are_held_to_its_budget(sources: list[str], served: int) -> None:
    g = guard(max_requests_per_address=1, stranger_exchanges_per_s=float("inf"))

    async def main() -> tuple[int, int]:
        release = asyncio.Event()
        held = [asyncio.create_task(ask(g, s, True, release)) for s in sources[:8]]
        await asyncio.sleep(0.01)
        honest = await asyncio.wait_for(ask(g, HONEST, True), 1.0)
        release.set()
        return (await asyncio.gather(*held)).count(200), honest

    assert asyncio.run(main()) == (served, 200)


@pytest.mark.parametrize("sources, held", [(ONE_48, 16 * SHARE), (MANY_48S, 128 + 8)],
                         ids=["one /48", "control: 64 /48s"])
def test_connections_of_one_48_are_held_to_its_cap(sources: list[str], held: int) -> None:
    caps = ConnectionCaps(max_connections=128, per_address=16, reserved=8, blocks=BLOCKS)
    assert sum(caps.admit(s) for s in sources for _ in range(16)) == held
    if sources is ONE_48:  # room left: another /48's /64 still gets its own 16
        assert sum(caps.admit(HONEST) for _ in range(20)) == 16


def test_defaults_keep_a_budget_per_48_at_four_64s() -> None:
    assert NetConfig().blocks() == Blocks(48, 4) and RefusalBench.of(NetConfig()).blocks == Blocks(48, 4)
    with pytest.raises(ValueError):
        NetConfig(ipv6_block_prefix=65)
    with pytest.raises(ValueError):
        NetConfig(ipv6_block_share=0)


def address(key: str) -> str:
    """An address of budget key `key` ("2001:db8:1:2::/64" -> 2001:db8:1:2::1)."""
    return key.partition("/")[0] + "1"


def uploads_held(tmp_path, monkeypatch, sources: list[str], cfg: SwarmDataConfig) -> tuple[int, int]:
    """Uploads of one shard that `sources` (then HONEST) hold at once, each asked for by each /64 once
    and none read: (how many of the sources' were held, HONEST's status: 200 held, else refused)."""
    monkeypatch.setattr(routes, "SENDFILE", False)  # written piece by piece, into a writer that holds them
    store = own_store(tmp_path, {"a.tar": bytes(range(256)) * 64})
    digest = store.manifest.shards[0].sha256
    server = routes.ShardServer(store, cfg, Metrics(process=False))
    app = web.Application()
    routes.add_shard_routes(app, server, blocks=BLOCKS)
    serve = next(r.handler for r in app.router.routes() if r.resource is not None
                 and r.resource.canonical == "/v1/shards/{digest}")

    async def main() -> tuple[int, int]:
        writer, release = held_writer()

        def get(key: str) -> asyncio.Task[web.StreamResponse]:
            request = make_mocked_request("GET", f"/v1/shards/{digest}", match_info={"digest": digest}, writer=writer)
            return asyncio.create_task(serve(request.clone(remote=address(key))))

        flood = [get(s) for s in sources]
        await asyncio.sleep(0.05)
        held = server.uploads
        honest = get(HONEST)
        await asyncio.sleep(0.05)
        honest_held = server.uploads - held
        release.set()
        await asyncio.gather(*flood, honest)
        return held, 200 if honest_held else honest.result().status

    return asyncio.run(main())


@pytest.mark.parametrize("sources, held", [(ONE_48[:16], SHARE), (MANY_48S[:16], 16)],
                         ids=["one /48", "control: 16 /48s"])
def test_shard_uploads_of_one_48_are_held_to_its_share(tmp_path, monkeypatch, sources: list[str], held: int) -> None:
    """One upload a /64, 24 in all: 16 /64s of one /48 held 16; now 4 (4 /64s' worth), while 16 /48s
    hold one each, and another /48's /64 gets its own."""
    cfg = SwarmDataConfig(max_uploads=24, max_uploads_per_address=1)
    assert uploads_held(tmp_path, monkeypatch, sources, cfg) == (held, 200)


@pytest.mark.parametrize("sources, held", [(ONE_48[:8] * 2, SHARE), (MANY_48S[:8], 8)],
                         ids=["one /48", "control: 8 /48s"])
def test_once_half_the_upload_slots_are_in_use_one_48_holds_share_of_them(tmp_path, monkeypatch,
                                                                          sources: list[str], held: int) -> None:
    """The defaults (8 uploads, 2 a /64, one a /64 once 4 are in use): 8 /64s of one /48, each asking
    twice, held all 8 slots and another /48's /64 was told 503; now the /48 holds 4 (4 /64s' one
    each), and that /64 gets one of the rest."""
    assert uploads_held(tmp_path, monkeypatch, sources, SwarmDataConfig()) == (held, 200 if held < 8 else 503)


@pytest.mark.parametrize("sources, sent", [(ONE_48, SHARE), (MANY_48S, FLOOD)], ids=["one /48", "control: 64 /48s"])
def test_snapshots_in_answers_to_one_48_are_held_to_its_budget(sources: list[str], sent: int) -> None:
    """A snapshot a /64 each 10 s, 256 in all at once, as the node makes the budget (its default
    blocks): 64 /64s of one /48 drew 64 at once and 64 more 10 s later; now 4 and 4, as 4 /64s
    would. Another /48's /64 draws its own."""
    budget = AnswerBudget(every_s=10.0, per_min=60.0, burst=256, now=0.0)

    def drawn(asking: list[str], now: float) -> int:
        return [budget.withheld(b"k", ticketed=True, verified={b"k"}, address=a, now=now) for a in asking].count(None)

    assert (drawn(sources, 0.0), drawn([HONEST] * 2, 0.0), drawn(sources, 10.0)) == (sent, 1, sent)
