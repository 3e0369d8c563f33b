"""An address refused too often is turned away before HTTP is parsed (`peer.net.refusal_bench`;
NetConfig.refusals_per_s, refusal_burst).

Requests sent back to back, each refused with 429 before its body was read, still cost the event
loop a parsed request, a middleware run and an answer apiece: a victim pinned to one core lost
about half its training steps. Now, past its refusal budget, an address's connections are
closed as they are made, or at their next bytes, and aiohttp never sees them; another address,
and the same address once back within its rate, is served as before."""

from __future__ import annotations

import asyncio

from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.refusal_bench import RefusalBench
from tests.unit.guarded_server_helpers import ask, refusing_site

FLOODER, OTHER = "127.0.3.1", "127.0.3.2"
RATE, BURST = 1.0, 6


def test_past_its_burst_of_refusals_an_address_is_benched_until_it_is_back_within_its_rate() -> None:
    clock = [0.0]
    bench = RefusalBench(RATE, BURST, clock=lambda: clock[0])
    for _ in range(BURST - 1):
        bench.refused("a")
    assert not bench.benched("a")
    bench.refused("a")
    assert bench.benched("a") and not bench.benched("b")
    clock[0] = 1.0
    assert not bench.benched("a")
    off = RefusalBench(float("inf"), 1, clock=lambda: clock[0])
    for _ in range(100):
        off.refused("a")
    assert not off.benched("a")


STRIKES = 3


def _flooded(addresses: int, clock: list[float]) -> RefusalBench:
    """A bench (2 refusals a second in all) whose budget in all `addresses` have spent, each refused
    past its strikes but within its own rate, a request a second from each over a minute."""
    bench = RefusalBench(RATE, BURST, clock=lambda: clock[0], in_all_per_s=2.0, strikes=STRIKES)
    for second in range(60):
        clock[0] = float(second)
        for i in range(addresses):
            if not bench.benched(f"flooder{i}"):
                bench.refused(f"flooder{i}")
    return bench


def test_many_addresses_each_within_its_rate_are_benched_once_the_refusals_in_all_are_spent() -> None:
    for addresses in (8, 256):
        clock = [0.0]
        bench = _flooded(addresses, clock)
        benched = sum(bench.benched(f"flooder{i}") for i in range(addresses))
        assert benched >= addresses * 3 // 4, (addresses, benched)


def test_an_address_is_not_benched_by_the_budget_in_all_for_its_first_few_refusals() -> None:
    clock = [0.0]
    bench = _flooded(256, clock)  # the budget in all is spent, and stays so
    for _ in range(STRIKES):  # a newcomer refused while others flood: answered each time
        bench.refused("newcomer")
        assert not bench.benched("newcomer")
    bench.refused("newcomer")  # refused again and again within the minute: one of the flood
    assert bench.benched("newcomer")
    clock[0] += 60.0  # a minute on, its strikes are back, and it is forgiven
    bench.refused("newcomer")
    assert not bench.benched("newcomer")


def test_connections_turned_away_past_their_budget_in_all_pause_accepting() -> None:
    clock = [0.0]
    bench = RefusalBench(RATE, BURST, clock=lambda: clock[0], turned_away_per_s=10.0)
    assert [bench.turned_away() for _ in range(10)] == [0.0] * 10
    assert bench.turned_away() == 0.5  # until half a second's budget is back
    clock[0] = 0.5
    assert bench.turned_away() == 0.0
    assert RefusalBench(RATE, BURST).turned_away() == 0.0  # no budget set: never


def _serve(cfg: NetConfig, requests: int) -> tuple[dict[str, int], list[int], Metrics]:
    """Serve POST /v1/exchange (refused: one a second per address, as a stranger's) and GET /metrics
    behind the guard and the capped site; FLOODER sends `requests` exchanges back to back, each on a
    new connection, then OTHER asks for /metrics. (How FLOODER's connections ended, by answer
    status or 0 for closed unanswered; OTHER's status; the server's metrics.)"""
    metrics = Metrics(process=False)

    async def main() -> tuple[dict[str, int], list[int]]:
        runner, site = await refusing_site(cfg, "127.0.0.1", metrics)
        loop = asyncio.get_running_loop()
        ends: dict[str, int] = {}
        for _ in range(requests):
            code = await loop.run_in_executor(None, ask, "127.0.0.1", site._bound_port, FLOODER, b"POST /v1/exchange",
                                              b"x" * 600)
            ends[str(code)] = ends.get(str(code), 0) + 1
        other = [await loop.run_in_executor(None, ask, "127.0.0.1", site._bound_port, OTHER, b"GET /metrics", b"")]
        await runner.cleanup()
        return ends, other

    ends, other = asyncio.run(main())
    return ends, other, metrics


def test_a_flood_of_refused_requests_from_one_address_is_closed_before_http() -> None:
    cfg = NetConfig(stranger_exchanges_per_s=1.0, stranger_exchange_burst=4, refusals_per_s=8.0, refusal_burst=BURST)
    ends, other, metrics = _serve(cfg, 60)
    # four first contacts reach the handler (refused there), then 429s until the budget of refusals
    # is spent, then the rest is closed unread; refusals refill at 8 a second (and 8 in all), so a few more pass
    assert ends.get("0", 0) >= 40 and ends.get("400", 0) + ends.get("429", 0) <= 60 - 40, ends
    assert metrics.get("connections_benched_total") >= 40 and other == [200]
    off = NetConfig(stranger_exchanges_per_s=1.0, stranger_exchange_burst=4, refusals_per_s=float("inf"))
    ends, other, metrics = _serve(off, 60)
    assert ends == {"400": 4, "429": 56} and metrics.get("connections_benched_total") == 0 and other == [200]


def test_benched_connections_past_their_budget_in_all_pause_accepting_and_others_still_get_in() -> None:
    cfg = NetConfig(stranger_exchanges_per_s=1.0, stranger_exchange_burst=4, refusals_per_s=8.0, refusal_burst=BURST,
                    benched_connections_per_s=8.0)
    ends, other, metrics = _serve(cfg, 60)
    assert metrics.get("accept_pauses_total") >= 2 and ends.get("0", 0) >= 30, (ends, metrics.get("accept_pauses_total"))
    assert other == [200]  # it waited for the pause to end, in the kernel's queue
