"""An adoption runs off the event loop: while the trainer loads an adopted state (a full copy
to the device, or a broadcast to every rank of a group: peer/local/group.py), the peer keeps
answering hellos, /v1/status and /metrics (docs/architecture.md, "Three threads"); one that
fails ends the join with its error, and the run stops rather than hang or train on it."""

from __future__ import annotations

import asyncio
import threading
import urllib.request

import pytest
import torch

from peer.core.actions import Adopt, JoinDone
from peer.core.gossip_config import GossipConfig
from peer.net.driver import AsyncDriver
from peer.net.config import NetConfig
from protocol import Identity
from tests.unit.driver_helpers import DIM, running_driver


def test_the_loop_answers_while_the_trainer_adopts() -> None:
    entered, release = threading.Event(), threading.Event()
    loaded: list[torch.Tensor] = []
    steps: list[int] = []

    def slow_adopt(x: torch.Tensor, step: int) -> None:
        entered.set()
        release.wait(5.0)  # bounded: a loop that never answers fails the test below, it does not hang it
        loaded.append(x.clone())
        steps.append(step)

    x = torch.full((DIM,), 2.5)
    with running_driver(0x41, slow_adopt) as rig:
        driver = rig.driver

        async def adopt() -> None:
            action = Adopt(token=7, address="127.0.0.1:1", step=40)
            driver._fetched.judged(7, x, [action])  # as `_fetch_state` leaves a state the session adopts
            driver.dispatch([action])
            assert driver._adopting is not None
            await driver._adopting

        adoption = asyncio.run_coroutine_threadsafe(adopt(), rig.loop)
        try:
            assert entered.wait(5.0)
            with urllib.request.urlopen(f"http://{driver.address}/v1/hello?nonce=ab12", timeout=2.0) as r:
                assert r.status == 200 and len(r.read()) > 0
            with urllib.request.urlopen(f"http://{driver.address}/metrics", timeout=2.0) as r:
                assert r.status == 200
            assert not adoption.done() and loaded == []  # answered while the trainer was still loading
        finally:
            release.set()
        adoption.result(5.0)
        assert len(loaded) == 1 and torch.equal(loaded[0], x) and steps == [40]
        assert torch.equal(rig.node.last_x, x) and rig.node.step == 40  # the node adopted after the trainer
        assert len(driver._fetched) == 0


def test_a_failed_adoption_ends_the_join_with_its_error_instead_of_hanging() -> None:
    """A trainer that fails while loading a state (a group whose ranks disagree) may hold part of
    it: joining still ends, with the error, so the runtime can stop instead of waiting forever."""

    def failing_adopt(x: torch.Tensor, step: int) -> None:
        raise RuntimeError("after a mix, ranks [1] hold other parameters than rank 0")

    with running_driver(0x42, failing_adopt) as rig:
        driver = rig.driver

        async def adopt_then_finish() -> None:
            action = Adopt(token=3, address="127.0.0.1:1", step=40)
            driver._fetched.judged(3, torch.ones(DIM), [action])
            driver.joined.clear()  # as while joining (join=False set it at start)
            driver.dispatch([action, JoinDone(None)])

        rig.call(adopt_then_finish(), 5)
        assert driver.joined.wait(5.0), "joining never ended after the adoption failed"
        assert isinstance(driver.join_error, RuntimeError) and "ranks [1]" in str(driver.join_error)
        assert len(driver._fetched) == 0


def test_the_runtime_stops_with_the_adoption_error_and_writes_no_checkpoint(tmp_path, monkeypatch) -> None:
    from peer.local.loop import LoopConfig
    from peer.startup import build_peer
    from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer

    start = AsyncDriver.async_start

    async def start_then_fail_the_join(self: AsyncDriver, bound_port: int) -> str:
        address = await start(self, bound_port)
        self.join_error = RuntimeError("the device ran out of memory")
        self.joined.set()
        return address

    monkeypatch.setattr(AsyncDriver, "async_start", start_then_fail_the_join)
    trainer = LeastSquaresTrainer(LeastSquaresConfig(dim=DIM, samples_per_shard=32, shard=0, n_shards=1, seed=0))
    peer = build_peer(trainer, LoopConfig(checkpoint_dir=tmp_path, max_steps=5), GossipConfig(swarm="adopt-test"),
                      NetConfig(listen="127.0.0.1:0", mdns=False), Identity.generate(b"\x43" * 32), emit=lambda line: None)
    with pytest.raises(RuntimeError, match="loading a neighbour's state failed"):
        peer.run(threading.Event())
    assert trainer.step_count == 0 and not list(tmp_path.glob("*.safetensors"))
