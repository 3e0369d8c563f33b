"""The thread contract, forced with events: the interleavings that used to crash, race or lose
work now cannot (docs/architecture.md, "Threads")."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from peer.boundary import BoundaryHook, PendingPublish
from peer.core.cadence import PublishCadence
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.metrics import Metrics
from peer.net.node_worker import NodeWorker
from peer.local.toy_trainer import LeastSquaresConfig, LeastSquaresTrainer
from protocol import Identity, TicketBook, make_update_frame, pack_bundle
from tests.unit.exchange_helpers import exchange, push

NOW = 1_000_000.0


def trainer(i: int = 0) -> LeastSquaresTrainer:
    return LeastSquaresTrainer(LeastSquaresConfig(dim=32, samples_per_shard=64, shard=i, n_shards=2, seed=i))


def node(i: int, x: torch.Tensor, now: float = NOW, **cfg) -> GossipNode:
    cfg = GossipConfig(**{"swarm": "t", "gossip_every": 1, "compression": "int8", "staleness": "constant", **cfg})
    return GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), {"w": ((x.numel(),), "float32")}, x, now=now,
                      view_gate=threading.Lock())  # the worker's thread writes copies the training thread mixes


def test_a_neighbour_restart_during_a_mix_cannot_crash_the_training_thread():
    """Once: the training thread dropped the lock to copy the parameters, a restarted
    neighbour's bundle reset its copy to None, and the mix died with a TypeError."""
    tr = trainer()
    me, them = node(0, tr.get_flat_params()), node(1, tr.get_flat_params() + 1.0)
    exchange(me, them, NOW)  # a first contact: a ticket, no snapshot
    exchange(me, them, NOW)  # we pulled their copy: news to mix
    copying, restarted = threading.Event(), threading.Event()
    real_get = tr.get_flat_params

    def get_flat_params_slowly() -> torch.Tensor:
        copying.set()
        assert restarted.wait(5)  # the worker ingests the restart while we copy
        return real_get()

    tr.get_flat_params = get_flat_params_slowly  # type: ignore[method-assign]
    hook = BoundaryHook(Mixer(me.cfg), me.view_slot, PendingPublish(), lambda s, d: None, Metrics(),
                        PublishCadence(1000, 0.0), lambda: NOW)
    errors: list[BaseException] = []

    def training() -> None:
        try:
            hook(tr, tr.step())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=training)
    t.start()
    assert copying.wait(5)
    reborn = node(1, real_get() + 2.0, now=NOW + 10)  # same key, new epoch: the node drops the old copy
    push(reborn, me, NOW + 10)
    restarted.set()
    t.join(5)
    assert not errors, errors
    assert hook.last_mixed == 1  # it mixed the copy it had taken, from an immutable view


def test_one_worker_means_one_control_frame_spends_its_ticket_once(monkeypatch):
    """Once: several executor threads checked the replay window before either recorded, so two
    copies of one frame both passed. The node worker runs one call at a time."""
    x = trainer().get_flat_params()
    me, them = node(0, x), node(1, x)
    reply, _ = me.handle_request(them.build_request(None, NOW), NOW)
    them.handle_response(reply, NOW)  # a first contact: they hold a ticket of ours
    body = them.build_request(me.identity.public_key, NOW)
    second_checking = threading.Event()
    calls = []
    real_refusal = TicketBook.refusal

    def refusal(self, header):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            second_checking.wait(0.5)  # a concurrent second call would get here now
        else:
            second_checking.set()
        return real_refusal(self, header)

    monkeypatch.setattr(TicketBook, "refusal", refusal)
    worker = NodeWorker(me, lambda: NOW)

    async def twice():
        return await asyncio.gather(*(worker.handle_request(body, "", frozenset()) for _ in range(2)))

    try:
        results = asyncio.run(twice())
    finally:
        worker.close()
    assert sorted(result.accepted for _, result in results) == [False, True], results
    assert len(set(calls)) == 1  # every check ran on the one worker thread


def test_a_publish_handed_over_while_the_worker_takes_one_is_not_lost():
    """Once: `pending, self._pending = self._pending, None` could drop a copy put between
    the read and the write. The hand-over is now one locked swap on each side."""
    slot = PendingPublish()
    slot.put(torch.zeros(2), 1)
    inside, real_lock = threading.Event(), slot._lock

    class SlowLock:
        def __enter__(self):
            real_lock.acquire()
            if threading.current_thread().name == "taker":
                inside.set()
                putter.join(0.3)  # the training thread tries to hand over now
            return self

        def __exit__(self, *exc):
            real_lock.release()

    slot._lock = SlowLock()  # type: ignore[assignment]
    taken: list = []
    taker = threading.Thread(target=lambda: taken.append(slot.take()), name="taker")
    putter = threading.Thread(target=lambda: (inside.wait(5), slot.put(torch.ones(2), 2)), name="putter")
    putter.start()
    taker.start()
    taker.join(5)
    putter.join(5)
    assert taken[0][1] == 1
    assert slot.take()[1] == 2  # the copy handed over meanwhile is still there


@pytest.mark.parametrize("partner_steps, copy_dtype, per_parameter",
                         [(0.0, "bfloat16", 2), (0.7, "bfloat16", 2 + 4), (0.0, "float32", 4), (0.7, "float32", 4 + 4)])
def test_each_neighbour_costs_its_copy_in_the_senders_precision_and_a_steps_sum_where_they_are_taken(
        partner_steps, copy_dtype, per_parameter):
    """A neighbour's copy is held as the sender holds its own (bfloat16 by default: 2 bytes a
    parameter), its steps sum (only where partner steps are taken) in float32."""
    x = trainer().get_flat_params()
    me = node(0, x, partner_steps=partner_steps)
    others = [node(i, x + i, partner_steps=partner_steps, copy_dtype=copy_dtype) for i in range(1, 5)]
    for step in range(1, 4):
        for o in others:
            o.publish(x + step * 0.1, step, NOW + step)
            key = me.identity.public_key if me.identity.public_key in o.neighbours else None
            reply, _ = me.handle_request(o.build_request(key, NOW + step), NOW + step)
            o.handle_response(reply, NOW + step)
    storages: dict[int, int] = {}

    def collect(obj, depth=0):
        if isinstance(obj, torch.Tensor):
            storages[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
        elif depth < 3 and hasattr(obj, "__dict__"):
            for value in vars(obj).values():
                collect(value, depth + 1)

    for n in me.neighbours.values():
        collect(n)
    assert len(me.neighbours) == 4
    assert sum(storages.values()) == 4 * per_parameter * x.numel()  # nothing else
    view = me.view_slot.current
    shared = {c.x_hat.untyped_storage().data_ptr() for c in view.copies}  # the view shares the copies
    assert shared <= set(storages) and len(storages) == (1 + (partner_steps > 0)) * len(shared)


def test_finite_updates_that_overflow_together_drop_the_copy_instead_of_mixing_it():
    """Each frame is finite (so each passes the protocol's check); their sum is not."""
    x = torch.zeros(8)
    me, them = node(0, x), node(1, x)
    push(them, me, NOW)  # control + snapshot at seq 0
    forged = [make_update_frame(them.identity, swarm="t", fingerprint=them.fingerprint, seq=seq, step=seq,
                                timestamp=NOW + 1, codec="identity", delta=torch.full((8,), 3e38),
                                extra={"epoch": them.epoch})[0] for seq in (1, 2)]
    epoch, ticket = them.held_tickets.take(me.identity.public_key)
    control = them._control_frame(me.identity.public_key, NOW + 1, to_epoch=epoch, ticket=ticket, reply=0, offer=0,
                                  frames=forged)  # a sender signs what it sends: the forged updates are bound
    assert me.handle_request(pack_bundle([control] + forged), NOW + 1)[1].accepted
    assert me.neighbours[them.identity.public_key].copy.x_hat is None
    assert me.view_slot.current.copies == ()


def test_publishes_coalesce_when_publishing_is_slower_than_training():
    """One publish job waits at most: a slow worker is not buried under stale publishes."""
    slot = PendingPublish()
    jobs = 0
    for step in range(1, 9):  # eight boundaries ask for a publish before the worker gets to it
        slot.put(torch.full((2,), float(step)), step)
        jobs += slot.needs_job()
    assert jobs == 1
    assert slot.take()[1] == 8  # and that job publishes the newest copy
    slot.put(torch.zeros(2), 9)
    assert slot.needs_job()  # once it started, the next request queues a new one


def test_mixing_in_place_gives_the_copy_out_and_back_result():
    x = torch.randn(64)
    me = node(0, x)
    for i in (1, 2, 3):
        other = node(i, x + torch.randn(64) * i)
        exchange(me, other, NOW)  # a first contact: a ticket, no snapshot
        exchange(me, other, NOW)  # pulled: these copies move us
    view = me.view_slot.current
    mixed, report = Mixer(me.cfg, 3).mix(x, view, 10, NOW)
    delta, _ = Mixer(me.cfg, 3).mix(None, view, 10, NOW)
    assert report.mixed == 3
    assert torch.allclose(x + delta, mixed, rtol=0, atol=1e-6) and not torch.equal(mixed, x)


def test_the_worker_counts_each_jobs_cpu_seconds_by_name():
    """What gossip costs a running peer is on /metrics: CPU seconds of the worker, per job."""
    x = trainer().get_flat_params()
    me = node(0, x)
    me.metrics = Metrics()
    worker = NodeWorker(me, lambda: NOW)

    def burn() -> int:
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        return 7

    async def run() -> int:
        await worker.build_request(None)
        return await worker.job("burn", burn)

    try:
        assert asyncio.run(run()) == 7
    finally:
        worker.close()
    assert me.metrics.get("worker_cpu_seconds_total", task="burn") >= 0.05
    assert me.metrics.get("worker_cpu_seconds_total", task="build_request") > 0
