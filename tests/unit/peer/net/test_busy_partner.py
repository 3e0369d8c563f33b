"""A partner that answers 429 ("busy": its rate budget for our address is spent) names when to ask
again (`Retry-After`), and we rest it until then instead of asking at our next publish.

Asked again at once it refuses again, and with benching on (`NetConfig.refusals_per_s`) an
address refused past its budget is turned away before HTTP is parsed: two honest peers on one
host, publishing every step, had their address benched within seconds, and with it every
request from that host, `gossip-tts status` included."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiohttp import ClientSession, TCPConnector, web
from aiohttp.test_utils import TestServer

from peer.core.actions import Count, Exchange, SendHello
from peer.core.config import SessionConfig
from peer.core.hello import Hello
from peer.core.session import Session
from peer.core.token_bucket import AddressBuckets, TokenBucket
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.errors import DEFAULT_BUSY_S, MAX_BUSY_S, busy_for
from peer.net.http_guard import MAX_RETRY_AFTER_S, TICKETED_KEY, RequestGuard
from peer.net.refusal_bench import RefusalBench

A, B = "10.0.0.1:7000", "10.0.0.2:7000"
IDS = {A: "01" * 32, B: "02" * 32}


def verified_session(*addresses: str, **cfg) -> Session:
    s = Session(SessionConfig(**{"join": False, "pulls_per_publish": 1, **cfg}), peer_id="aa" * 32, rng=random.Random(0))
    for h in s.start(0.0, listen="", bootstrap=list(addresses), step=0, hello_seq_base=0):
        if isinstance(h, SendHello):
            s.hello_done(h.token, 0.1, hello=Hello(IDS[h.address], 0, h.address, ()))
    return s


def pulls(s: Session, step: int, now: float) -> list[Exchange]:
    return [a for a in s.step_boundary(step, True, now) if isinstance(a, Exchange)]


def test_a_busy_partner_rests_until_its_retry_after_and_keeps_its_place() -> None:
    s = verified_session(A)
    first = pulls(s, 1, 1.0)
    assert [e.address for e in first] == [A]
    out = s.exchange_done(first[0].token, 1.1, error="HTTP 429", busy_s=3.0)
    assert Count("exchanges_busy_total") in out and not any(isinstance(a, SendHello) for a in out)  # no probe
    assert s.partners == [A]  # not dropped
    assert [pulls(s, step, 1.1 + 0.5 * step) for step in range(2, 6)] == [[]] * 4  # up to t=3.6 < 4.1
    again = pulls(s, 6, 4.2)
    assert [e.address for e in again] == [A]
    h = s.table.health(A)
    assert h is not None and h.failures == 0  # a busy answer is no failure of the partner


def test_while_one_partner_rests_the_others_are_pulled() -> None:
    s = verified_session(A, B, max_partners=2)
    first = pulls(s, 1, 1.0)[0]
    s.exchange_done(first.token, 1.1, error="HTTP 429", busy_s=10.0)
    other = first.address == A and B or A
    for step in range(2, 8):
        e = pulls(s, step, 1.0 + step)
        assert [x.address for x in e] == [other]
        s.exchange_done(e[0].token, 1.2 + step, peer_id=IDS[other], rtt=0.1)


def test_a_failure_that_is_not_busy_still_replaces_the_partner() -> None:
    s = verified_session(A)
    e = pulls(s, 1, 1.0)[0]
    s.exchange_done(e.token, 1.1, error="HTTP 500")  # no busy_s: a failure, as before
    assert s.partners == []


@pytest.mark.parametrize("header, expected", [
    ("7", 7.0), (" 2 ", 2.0), ("0", 0.0), ("86400", MAX_BUSY_S), (None, DEFAULT_BUSY_S), ("", DEFAULT_BUSY_S),
    ("-5", DEFAULT_BUSY_S), ("1e9", DEFAULT_BUSY_S), ("9" * 400, DEFAULT_BUSY_S), ("nan", DEFAULT_BUSY_S),
    ("Wed, 21 Oct 2015 07:28:00 GMT", DEFAULT_BUSY_S), ("\u0663", DEFAULT_BUSY_S),
])
def test_a_retry_after_from_a_stranger_is_read_within_bounds(header, expected) -> None:
    assert busy_for(429, header) == expected


def test_only_429_means_busy() -> None:
    assert busy_for(503, "5") is None and busy_for(400, "5") is None and busy_for(200, None) is None


def test_a_bucket_says_when_its_next_token_is_back() -> None:
    b = TokenBucket(tokens=-1.0, at=0.0)
    assert b.wait(4.0) == pytest.approx(0.5) and TokenBucket(1.0, 0.0).wait(4.0) == 0.0
    assert TokenBucket(0.5, 0.0).wait(0.0) == float("inf")
    buckets = AddressBuckets(2.0, 2.0, 8)
    buckets.charge("x", 0.0, 4.0)  # from 2 tokens to -2: three tokens short of a whole one
    assert buckets.wait("x", 0.0) == pytest.approx(1.5) and buckets.wait("x", 1.5) == pytest.approx(0.0)


def _exchanges(cfg: NetConfig, n: int, *, heed: bool = True) -> tuple[list[tuple[int, str | None]], bool]:
    """(status, Retry-After) of `n` exchanges posted from 127.0.0.1, 10 ms apart on a fake clock,
    through a guarded server; and whether the address was ever benched. `heed`: after a 429 the
    client waits what its `Retry-After` says (as `Session.exchange_done(busy_s=...)` makes a peer)."""
    clock = [0.0]
    bench = RefusalBench(cfg.refusals_per_s, cfg.refusal_burst, lambda: clock[0], strikes=cfg.refusal_strikes)
    g = RequestGuard(cfg, Metrics(process=False), 1 << 20, lambda: clock[0], bench=bench)

    async def handler(request: web.Request) -> web.Response:
        request[TICKETED_KEY] = False  # a first contact: it costs the address a stranger token
        return web.Response(body=b"answer")

    async def main() -> tuple[list[tuple[int, str | None]], bool]:
        app = web.Application(middlewares=[g.middleware()])
        app.router.add_post("/v1/exchange", handler)
        async with TestServer(app, host="127.0.0.1") as server:
            async with ClientSession(connector=TCPConnector(force_close=True)) as client:
                out, benched = [], False
                for _ in range(n):
                    async with client.post(server.make_url("/v1/exchange"), data=b"") as r:
                        out.append((r.status, r.headers.get("Retry-After")))
                    benched = benched or bench.benched("127.0.0.1")
                    wait = busy_for(*out[-1]) if heed else None
                    clock[0] += 0.01 if wait is None else wait
                return out, benched

    return asyncio.run(main())


def test_the_guards_429_names_when_its_budget_has_room() -> None:
    answers, _ = _exchanges(NetConfig(stranger_exchanges_per_s=0.25, stranger_exchange_burst=1), 3, heed=False)
    assert answers[0] == (200, None)
    for status, retry_after in answers[1:]:
        assert status == 429 and retry_after == "4"
    assert MAX_RETRY_AFTER_S == MAX_BUSY_S  # what we send is what we would heed


def test_a_peer_that_heeds_retry_after_is_never_benched_and_one_that_does_not_is() -> None:
    cfg = NetConfig(stranger_exchanges_per_s=2.0, stranger_exchange_burst=4)
    heeding, benched = _exchanges(cfg, 150)
    assert not benched and sum(s == 200 for s, _ in heeding) >= 70  # about every other one is answered
    hammering, control_benched = _exchanges(cfg, 150, heed=False)
    assert control_benched and sum(s == 200 for s, _ in hammering) < 10
