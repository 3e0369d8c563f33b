"""Joining as its own state machine (`peer.core.join`): each phase and what it asks for, with
exact values, without a session."""

from __future__ import annotations

import pytest
import torch

from peer.core.actions import Count, FetchState, JoinDone, Log, SendHello
from peer.core.config import SessionConfig
from peer.core.join import Join, JoinPhase, read_state, sign_state
from protocol import FrameRefused, Identity, VerifyPolicy, flat_model_spec, make_snapshot_frame


class Requests:
    """The session's side: tokens counted up, every request kept."""

    def __init__(self, first: int = 1) -> None:
        self.token, self.sent = first - 1, []

    def hello(self, address: str) -> SendHello:
        self.token += 1
        self.sent.append(SendHello(self.token, address))
        return self.sent[-1]

    def fetch(self, address: str) -> FetchState:
        self.token += 1
        self.sent.append(FetchState(self.token, address))
        return self.sent[-1]


def progress(join: Join, req: Requests, now: float, known: list[str], *, step: int = 100,
             pending: dict[str, int] | None = None, unreachable: dict[str, str] | None = None) -> list:
    return join.progress(now, step=step, known=known, pending=pending or {}, unreachable=unreachable or {},
                         hello=req.hello, fetch=req.fetch)


def test_with_nobody_known_it_waits_until_join_wait_s_then_trains_alone() -> None:
    join, req = Join(SessionConfig(join_wait_s=2.0, join_timeout_s=20.0), now=10.0), Requests()
    assert (join.phase, join.deadline()) == (JoinPhase.WAITING, 12.0)
    assert progress(join, req, 11.9, []) == [] and join.phase is JoinPhase.WAITING
    assert progress(join, req, 12.0, []) == [JoinDone(None), Count("joins_alone_total"),
                                             Log("joining: no peer found; training from our own weights")]
    assert join.done and join.deadline() is None and req.sent == []


def test_it_asks_the_known_peers_reuses_a_hello_in_flight_and_fetches_the_furthest_along() -> None:
    join, req = Join(SessionConfig(), now=0.0), Requests(first=10)
    asked = progress(join, req, 0.0, ["a", "b", "c"], pending={"b": 7})
    assert asked == [SendHello(10, "a"), SendHello(11, "c")]  # b's hello already out: its answer counts
    assert (join.phase, join.asked, join.deadline()) == (JoinPhase.ASKING, {7: "b", 10: "a", 11: "c"}, None)
    assert join.hello_ended(7, "b", 300) and progress(join, req, 0.1, ["a", "b", "c"]) == []  # two still out
    assert join.hello_ended(10, "a", 500) and join.hello_ended(11, "c", 500)
    assert not join.hello_ended(99, "x", 900)  # not a hello joining asked
    assert progress(join, req, 0.2, ["a", "b", "c"]) == [FetchState(12, "a")]  # a tie goes to the lower address
    assert (join.phase, join.fetching, join.answers) == (JoinPhase.FETCHING, 12, [(500, "c"), (300, "b")])
    assert not join.fetch_ended(11) and join.fetch_ended(12)  # a stale token does not end the fetch
    assert progress(join, req, 0.3, []) == [FetchState(13, "c")]  # that fetch failed: the next one along
    assert join.fetch_ended(13)
    assert progress(join, req, 0.4, [], step=400)[0] == JoinDone(None)  # b, at 300, is behind our step 400 now
    assert join.done and req.sent[-1] == FetchState(13, "c")


def test_it_falls_back_only_to_peers_ahead_of_us_and_then_trains_alone() -> None:
    join, req = Join(SessionConfig(), now=0.0), Requests()
    progress(join, req, 0.0, ["a", "b"])
    join.hello_ended(1, "a", 150)
    join.hello_ended(2, "b", 90)  # behind our step 100: never fetched
    assert progress(join, req, 0.1, []) == [FetchState(3, "a")]
    assert join.fetch_ended(3)
    assert progress(join, req, 0.2, []) == [JoinDone(None), Count("joins_alone_total"),
                                           Log("joining: no peer is further along; training from our own weights")]
    assert join.done


def test_an_adopted_state_ends_it() -> None:
    join, req = Join(SessionConfig(), now=0.0), Requests()
    progress(join, req, 0.0, ["a"])
    join.hello_ended(1, "a", 500)
    progress(join, req, 0.1, [])
    assert join.fetch_ended(2)
    join.adopted()
    assert join.done and progress(join, req, 0.2, ["a"]) == []


def test_while_nobody_answers_it_asks_again_after_the_retry_until_its_timeout_naming_why() -> None:
    join, req = Join(SessionConfig(join_timeout_s=5.0), now=0.0), Requests()
    assert progress(join, req, 0.0, ["a"]) == [SendHello(1, "a")]
    assert join.hello_ended(1, "a", None)
    assert progress(join, req, 0.5, ["a"]) == []  # nobody answered: waiting again
    assert (join.phase, join.ask_at) == (JoinPhase.WAITING, 0.5 + 1.0)  # join_retry_s
    assert progress(join, req, 1.4, ["a"]) == []
    assert progress(join, req, 1.5, ["a"]) == [SendHello(2, "a")]
    join.hello_ended(2, "a", None)
    assert progress(join, req, 5.0, ["a"], unreachable={"a": "connection refused"}) == [
        JoinDone(None), Count("joins_alone_total"),
        Log("joining: no peer answered (a: connection refused); training from our own weights")]


def test_it_asks_at_most_join_max_asked_peers() -> None:
    for cfg, asked in ((SessionConfig(), 8), (SessionConfig(join_max_asked=2), 2)):
        join, req = Join(cfg, now=0.0), Requests()
        known = [f"p{i:02d}" for i in range(11)]
        assert progress(join, req, 0.0, known) == [SendHello(i + 1, known[i]) for i in range(asked)]


def test_only_a_snapshot_signed_as_a_state_is_read_as_one() -> None:
    identity, x = Identity.generate(bytes(32)), torch.arange(6, dtype=torch.float32)
    policy = VerifyPolicy(swarm="s", fingerprint="f", model_spec=flat_model_spec(6))
    got, step, source = read_state(sign_state(identity, "s", "f", 1, 42, 1000.0, x), policy, 1000.0)
    assert torch.equal(got, x) and step == 42 and source is None  # exact parameters name no public copy
    exchange_snapshot = make_snapshot_frame(identity, swarm="s", fingerprint="f", seq=2, step=42, timestamp=1000.0,
                                            vector=x)
    with pytest.raises(FrameRefused, match="not a signed state"):
        read_state(exchange_snapshot, policy, 1000.0)
    with_steps = make_snapshot_frame(identity, swarm="s", fingerprint="f", seq=2, step=42, timestamp=1000.0,
                                     vector=x, steps=x, extra={"kind": "state"})
    with pytest.raises(FrameRefused, match="alone"):  # refused and counted, not a ValueError
        read_state(with_steps, policy, 1000.0)


def test_the_step_counted_on_from_is_at_most_the_median_claim_so_one_far_claim_cannot_set_it() -> None:
    join, req = Join(SessionConfig(), now=0.0), Requests()
    progress(join, req, 0.0, ["a", "b", "c"])
    assert join.counted_step(10**9) == 10**9  # nobody answered yet: nothing to bound it by
    for token, address, step in ((1, "a", 500), (2, "b", 510), (3, "liar", 10**9)):
        join.asked[token] = address
        assert join.hello_ended(token, address, step)
    assert progress(join, req, 0.1, ["a", "b", "liar"]) == [FetchState(4, "liar")]  # the furthest along is fetched
    assert join.counted_step(10**9) == 510  # but its claim counts only up to the median answer
    assert join.counted_step(505) == 505  # a claim below the median stands


def test_when_the_peers_further_along_send_no_state_it_says_so_and_why():
    """The only peer ahead is busy (HTTP 429): joining ends alone naming it and the reason, not
    claiming that no peer is further along."""
    join, req = Join(SessionConfig(), now=0.0), Requests()
    progress(join, req, 0.0, ["a", "b"])
    assert join.hello_ended(1, "a", 500) and join.hello_ended(2, "b", 50)
    assert progress(join, req, 0.1, ["a", "b"]) == [FetchState(3, "a")]
    assert join.fetch_ended(3, "HTTP 429, busy")
    done = progress(join, req, 0.2, ["a", "b"])
    assert done[:2] == [JoinDone(None), Count("joins_alone_total")]
    assert done[2] == Log("joining: the peers further along sent no state (a: HTTP 429, busy); "
                          "training from our own weights")
