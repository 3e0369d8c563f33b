"""One `Driver` contract: every action the session can emit has a handler, both drivers have
every handler, and `perform` picks it from the table (publishes coalescing on the way)."""

from __future__ import annotations

import typing

import pytest

from peer.core.actions import (
    Action, Adopt, Count, Exchange, FetchState, Forget, JoinDone, Log, Publish, SendHello,
)
from peer.core.driver_contract import HANDLERS, Driver, perform
from peer.net.driver import AsyncDriver
from simnet.driver.sim_peer import SimPeer

ONE_OF_EACH: list[Action] = [
    Publish(), Exchange(1, "a:1", "ab"), SendHello(2, "a:1"), FetchState(3, "a:1"), Adopt(3, "a:1", 7),
    JoinDone("a:1"), Forget("ab", "a:1"), Log("hi"), Count("n"),
]


class Slot:
    def __init__(self, free: bool) -> None:
        self.free = free

    def needs_job(self) -> bool:
        return self.free


class Recorder(Driver):
    """Records which handler each action reached."""

    def __init__(self, free: bool = True) -> None:
        self.seen: list[tuple[str, Action]] = []
        self._slot = Slot(free)

    @property
    def publish_slot(self) -> Slot:
        return self._slot

    def publish(self, a: Publish) -> None:
        self.seen.append(("publish", a))

    def exchange(self, a: Exchange) -> None:
        self.seen.append(("exchange", a))

    def send_hello(self, a: SendHello) -> None:
        self.seen.append(("send_hello", a))

    def fetch_state(self, a: FetchState) -> None:
        self.seen.append(("fetch_state", a))

    def adopt(self, a: Adopt) -> None:
        self.seen.append(("adopt", a))

    def join_done(self, a: JoinDone) -> None:
        self.seen.append(("join_done", a))

    def forget(self, a: Forget) -> None:
        self.seen.append(("forget", a))

    def log(self, a: Log) -> None:
        self.seen.append(("log", a))

    def count(self, a: Count) -> None:
        self.seen.append(("count", a))


def test_every_action_has_one_handler_and_one_of_each_is_covered_here() -> None:
    kinds = set(typing.get_args(Action))
    assert set(HANDLERS) == kinds
    assert {type(a) for a in ONE_OF_EACH} == kinds


def test_perform_sends_each_action_to_its_own_handler() -> None:
    d = Recorder()
    for a in ONE_OF_EACH:
        perform(d, a)
    names = [name for name, _ in d.seen]
    assert names == ["publish", "exchange", "send_hello", "fetch_state", "adopt", "join_done", "forget", "log", "count"]
    assert [a for _, a in d.seen] == ONE_OF_EACH
    assert set(names) == set(Driver.__abstractmethods__) - {"publish_slot"}


def test_a_publish_is_not_queued_while_one_waits() -> None:
    d = Recorder(free=False)
    perform(d, Publish())
    perform(d, Count("n"))
    assert [name for name, _ in d.seen] == ["count"]


@pytest.mark.parametrize("driver", [AsyncDriver, SimPeer])
def test_both_drivers_keep_the_whole_contract(driver: type) -> None:
    assert Driver in driver.__mro__
    assert not driver.__abstractmethods__  # every handler is its own
    for name in Driver.__abstractmethods__:
        assert getattr(driver, name) is not getattr(Driver, name), name


def test_a_driver_missing_a_handler_cannot_be_built() -> None:
    class NoForget(Recorder):
        forget = Driver.forget  # type: ignore[assignment]

    assert "forget" in NoForget.__abstractmethods__
    with pytest.raises(TypeError):
        NoForget()
