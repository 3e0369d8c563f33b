"""What a simulated peer may touch of its simulation: the world, handed to it at build time.

A real peer sees a clock, a network and the addresses it was told; a simulated peer gets
exactly that and no more: the scheduler and its virtual clock, the links, the cost model of
protocol work, the speed model of its steps, the address book (who listens where, and the
bootstrap addresses each slot is told) and a factory of metrics. It never holds the swarm
that built it, so what a driver reads is all listed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from peer.metrics import Metrics
from simnet.world.cost import CostConfig
from simnet.world.links import SimLinks
from simnet.world.scheduler import Scheduler, VirtualClock
from simnet.world.speed import SpeedModel

Reply = Callable[[bytes | None, str], None]
"""How a simulated server answers: (body, "") on 200, (None, why) otherwise."""


class Host(Protocol):
    """What is reachable at a simulated address: the server half of a simulated peer."""

    index: int
    address: str
    attacker: bool

    @property
    def public_key(self) -> bytes:
        """The key this host signs with (public: its hellos and mDNS name it)."""
        ...

    def serve_exchange(self, src: int, body: bytes, reply: Reply) -> None: ...

    def serve_hello(self, src: int, reply: Reply, nonce: str) -> None: ...

    def serve_state(self, src: int, reply: Reply) -> None: ...


class AddressBook:
    """Who listens at which address, and the `--peer` addresses each slot starts with."""

    def __init__(self, bootstrap: list[list[int]]) -> None:
        self._bootstrap = bootstrap
        self._hosts: list[Host] = []
        self._index: dict[str, int] = {}

    def add(self, host: Host) -> None:
        """Register the next slot's host (slots are added in index order)."""
        if host.index != len(self._hosts):
            raise ValueError(f"hosts must be added in index order: got {host.index}, expected {len(self._hosts)}")
        self._hosts.append(host)
        self._index[host.address] = host.index

    def index_of(self, address: str) -> int | None:
        """The slot listening at `address`, or None where nothing ever listened (a made-up address)."""
        return self._index.get(address)

    def host_at(self, address: str) -> Host | None:
        j = self._index.get(address)
        return None if j is None else self._hosts[j]

    def host(self, index: int) -> Host:
        return self._hosts[index]

    def __len__(self) -> int:
        return len(self._hosts)

    def bootstrap_for(self, index: int) -> list[str]:
        """The `--peer` addresses slot `index` starts with (again after a restart)."""
        return [self._hosts[j].address for j in self._bootstrap[index]]


@dataclass
class SimWorld:
    """The scheduler, clock, links, cost and speed models and address book."""

    seed: int
    sched: Scheduler
    clock: VirtualClock
    """Unix-like seconds for frames (an epoch plus the scheduler's time)."""
    links: SimLinks
    cost: CostConfig
    speed: SpeedModel
    book: AddressBook
    new_metrics: Callable[[], Metrics]
    """A fresh metrics registry for one peer incarnation, counted in the run's totals."""
    trace: dict[int, list] | None = None
    """When a dict, every action each peer's driver performs is appended under its index."""

    def now(self) -> float:
        """Virtual seconds since the start of the run (the session's clock)."""
        return self.sched.now()
