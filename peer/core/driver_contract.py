"""The one contract both drivers keep: a handler for each action the session emits, and one
`perform` that picks it from a table.

The real driver (`peer.net.driver.AsyncDriver`) and simnet's (`simnet.driver.sim_peer.SimPeer`)
differ only in how they do an action (sockets and a worker thread, or simulated links and a
virtual clock); which handler an action goes to, and the rule they share (publishes coalesce),
are decided here once. Adding an action is an entry in `HANDLERS` and a method in `Driver`;
a driver that lacks it fails the contract's test, not a run.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Callable, Protocol

from peer.core.actions import (
    Action, Adopt, Count, Exchange, FetchState, Forget, JoinDone, Log, Publish, SendHello,
)


class PublishSlot(Protocol):
    """Where the training thread hands over the copy to publish (`peer.boundary.PendingPublish`)."""

    def needs_job(self) -> bool: ...


class Driver(Protocol):
    """What a driver does with each action; it chooses nothing (the session did).

    Both drivers subclass it by name, so one that lacks a handler cannot be built."""

    @property
    @abstractmethod
    def publish_slot(self) -> PublishSlot:
        """The hand-over the publish jobs take their copy from."""
        ...

    @abstractmethod
    def publish(self, a: Publish) -> None:
        """Queue a publish job on the node worker (only asked when none waits)."""

    @abstractmethod
    def exchange(self, a: Exchange) -> None:
        """Build a request, send it, hand the answer to the node, report `exchange_done`."""

    @abstractmethod
    def send_hello(self, a: SendHello) -> None:
        """Ask for a signed hello, verify it, report `hello_done`."""

    @abstractmethod
    def fetch_state(self, a: FetchState) -> None:
        """Fetch a signed state, verify and judge it, keep it, report `state_done`."""

    @abstractmethod
    def adopt(self, a: Adopt) -> None:
        """Load the kept state into the trainer and the node."""

    @abstractmethod
    def join_done(self, a: JoinDone) -> None:
        """After any adoption: tell the session (`Session.joined`) and start training."""

    @abstractmethod
    def forget(self, a: Forget) -> None:
        """Drop what the node holds of an evicted peer (its key is always known)."""

    @abstractmethod
    def log(self, a: Log) -> None:
        """A line for the operator (a driver may keep quiet)."""

    @abstractmethod
    def count(self, a: Count) -> None:
        """Add to a counter."""


HANDLERS: dict[type, Callable[[Driver, Any], None]] = {
    Publish: lambda d, a: d.publish(a),
    Exchange: lambda d, a: d.exchange(a),
    SendHello: lambda d, a: d.send_hello(a),
    FetchState: lambda d, a: d.fetch_state(a),
    Adopt: lambda d, a: d.adopt(a),
    JoinDone: lambda d, a: d.join_done(a),
    Forget: lambda d, a: d.forget(a),
    Log: lambda d, a: d.log(a),
    Count: lambda d, a: d.count(a),
}
"""Each action type and the `Driver` handler that performs it."""


def perform(driver: Driver, action: Action) -> None:
    """Do what one action says through `driver`'s handler for it.

    Publishes coalesce: a publish job takes the newest copy when it runs, so one waiting job
    serves every publish asked before it starts, and a slow worker is not buried under stale ones.
    """
    if isinstance(action, Publish) and not driver.publish_slot.needs_job():
        return
    HANDLERS[type(action)](driver, action)
