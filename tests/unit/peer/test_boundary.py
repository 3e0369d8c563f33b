"""BoundaryHook's bookkeeping: what a step reports reaches /metrics; publishes every gossip_every steps."""

from __future__ import annotations

import re

import pytest
import torch

from peer.boundary import BoundaryHook, PendingPublish
from peer.core.cadence import PublishCadence
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.view import MixView, ViewSlot
from peer.metrics import Metrics
from peer.trainer import Capabilities, StepStats


class Flat:
    capabilities = Capabilities()

    def __init__(self) -> None:
        self.x, self.step_count = torch.zeros(4), 0
        self.scales: list[float] = []

    def get_flat_params(self) -> torch.Tensor:
        return self.x.clone()

    def flat_params_bf16(self, generator: torch.Generator, device: torch.device | None = None) -> torch.Tensor:
        return self.x.to(device=device, dtype=torch.bfloat16)

    def set_flat_params(self, flat: torch.Tensor) -> None:
        self.x = flat.clone()

    def set_step_scale(self, scale: float) -> None:
        self.scales.append(scale)


def test_trainer_figures_become_gauges_and_a_copy_is_handed_over_when_due():
    metrics, pending, told = Metrics(), PendingPublish(), []
    hook = BoundaryHook(Mixer(GossipConfig(swarm="t")), ViewSlot(MixView(torch.zeros(4))), pending,
                        lambda step, due: told.append((step, due)), metrics, PublishCadence(2, 0.0), lambda: 0.0)
    tr = Flat()
    for k in (1, 2):
        tr.step_count = k
        hook(tr, StepStats(k, 0.5, 8, extra={"skipped_samples": 3.0, "shard_errors": 1.0, "lr": 1e-3}))
    assert metrics.get("skipped_samples") == 3.0 and metrics.get("shard_errors") == 1.0
    assert "lr" not in metrics.render()  # only the listed figures become series
    assert told == [(1, False), (2, True)]
    assert pending.take()[1] == 2


def test_a_peer_much_slower_than_its_neighbours_publishes_at_their_pace():
    """Steps of 4 s; the neighbours' copies say they publish every second: after its first
    publish the hook hands a copy over at every step (the real clock and view, no cadence stub)."""
    from peer.core.view import CopyView

    x, now = torch.zeros(4), [0.0]
    slot = ViewSlot(MixView(x))
    told: list[tuple[int, bool]] = []
    cfg = GossipConfig(swarm="t", gossip_every=4)
    hook = BoundaryHook(Mixer(cfg), slot, PendingPublish(), lambda step, due: told.append((step, due)), Metrics(),
                        cfg.publish_cadence(), lambda: now[0])
    tr = Flat()
    for k in range(1, 9):
        now[0] = 4.0 * k
        seq = int(now[0])  # each neighbour published once a second up to now
        slot.publish(MixView(x, tuple(CopyView(bytes([j]) * 32, seq, x, float(seq), seq) for j in (1, 2, 3))))
        tr.step_count = k
        hook(tr, StepStats(k, 0.5, 8))
        publish_what_waits(hook.pending)
    assert [k for k, due in told if due] == [4, 5, 6, 7, 8]


def publish_what_waits(pending: PendingPublish) -> None:
    """A node worker that keeps up: the job the driver queues takes the copy and finishes."""
    if pending.needs_job() and pending.take() is not None:
        pending.finished()


class CountingFlat(Flat):
    """Counts parameter copies: on a GPU peer each is a device-to-host transfer of the model."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def get_flat_params(self) -> torch.Tensor:
        self.copies += 1
        return super().get_flat_params()


def test_no_parameter_copy_is_taken_while_the_worker_still_publishes_the_last_one():
    """Publishing every step with a worker that takes three steps per publish: a copy is taken
    only at the boundaries where the worker is free to publish it (steps 1, 4, 7), not at every
    due step, and the step after the worker finishes is due at once."""
    told: list[tuple[int, bool]] = []
    pending = PendingPublish()
    hook = BoundaryHook(Mixer(GossipConfig(swarm="t")), ViewSlot(MixView(torch.zeros(4))), pending,
                        lambda step, due: told.append((step, due)), Metrics(), PublishCadence(1, 0.0), lambda: 0.0)
    tr, busy_until = CountingFlat(), 0
    for k in range(1, 9):
        tr.step_count = k
        hook(tr, StepStats(k, 0.5, 8))
        if told[-1][1]:  # the driver queues a job; the worker takes the copy and works on it
            assert pending.needs_job() and pending.take() is not None
            busy_until = k + 2
        if k == busy_until:
            pending.finished()
    assert [k for k, due in told if due] == [1, 4, 7]
    assert tr.copies == 3


def test_a_copy_waiting_for_its_job_is_not_replaced_by_a_newer_one():
    """The driver has not yet taken the copy handed over at step 1: steps 2 and 3 take none."""
    pending, tr = PendingPublish(), CountingFlat()
    hook = BoundaryHook(Mixer(GossipConfig(swarm="t")), ViewSlot(MixView(torch.zeros(4))), pending,
                        lambda step, due: None, Metrics(), PublishCadence(1, 0.0), lambda: 0.0)
    for k in (1, 2, 3):
        tr.step_count = k
        hook(tr, StepStats(k, 0.5, 8))
    assert tr.copies == 1 and pending.take()[1] == 1
    assert not pending.ready()  # taken, not yet finished
    pending.finished()
    assert pending.ready()


def test_the_trainer_steps_larger_as_its_pulls_average_more_models_and_at_its_own_rate_alone():
    """Each publish period ends when the view holds a new x̂_i; the weights its pulls got tell the
    step-size rule how many models it averaged. Two fresh dense pulls per publish: a mean of 3."""
    from peer.core.view import CopyView

    cfg = GossipConfig(swarm="t", staleness="constant,gamma=0.5", clip=False, step_scale_warmup_periods=4,
                       partner_steps=0.0)  # the measured multiplier: partner steps take its place
    slot, metrics, tr = ViewSlot(MixView(torch.zeros(4))), Metrics(), Flat()
    hook = BoundaryHook(Mixer(cfg, 2), slot, PendingPublish(), lambda step, due: None, metrics,
                        cfg.publish_cadence(), lambda: 0.0)
    for k in range(1, 8):
        public = torch.full((4,), float(k))  # we published at every step: a new x̂_i each time
        copies = tuple(CopyView(bytes([j]) * 32, k, public + j, 0.0, pulled=k) for j in (1, 2))
        slot.publish(MixView(public, copies, 0.0, 0.0))
        tr.step_count = k
        hook(tr, StepStats(k, 0.5, 8))
    assert tr.scales == pytest.approx([1.75, 2.5, 3.0])  # rising (4 − 1)/4 per period to the 3 models averaged
    assert metrics.get("step_scale") == pytest.approx(3.0)
    for k in range(8, 13):  # the partners are gone: nothing pulled any more (a lower median of 8 periods)
        slot.publish(MixView(torch.full((4,), float(k)), (), 0.0, 0.0))
        hook(tr, StepStats(k, 0.5, 8))
    assert tr.scales[-1] == 1.0


def test_the_hook_decays_the_multiplier_by_the_trainers_own_step():
    """The same mean of 3 models with `step_scale_decay_steps` 7: the boost of 2 above 1 shrinks by
    7 / (7 + k) at the trainer's step k, and k is the trainer's count (a joiner's, taken over from
    the state it adopted, at the last boundary here), not the number of the hook's calls."""
    from peer.core.view import CopyView

    cfg = GossipConfig(swarm="t", staleness="constant,gamma=0.5", clip=False, step_scale_warmup_periods=4,
                       partner_steps=0.0, step_scale_decay_steps=7)
    slot, metrics, tr = ViewSlot(MixView(torch.zeros(4))), Metrics(), Flat()
    hook = BoundaryHook(Mixer(cfg, 2), slot, PendingPublish(), lambda step, due: None, metrics,
                        cfg.publish_cadence(), lambda: 0.0)
    for k in range(1, 8):
        public = torch.full((4,), float(k))
        copies = tuple(CopyView(bytes([j]) * 32, k, public + j, 0.0, pulled=k) for j in (1, 2))
        slot.publish(MixView(public, copies, 0.0, 0.0))
        tr.step_count = 100 + k if k == 7 else k  # a joiner's count: taken over from the state it adopted
        hook(tr, StepStats(k, 0.5, 8))
    # the first period ends at step 2 (the warm-up's bound, 1.75), the next at step 3: 1 + 2 · 7 / 10
    assert tr.scales[:2] == pytest.approx([1.75, 2.4])
    assert metrics.get("step_scale") == pytest.approx(1.0 + 2.0 * 7 / (7 + 107))


def test_under_the_budget_no_copy_is_taken_at_a_step_that_will_not_publish():
    """The default cadence (a 5% budget) with steps of 10 ms, 0.1 ms of gossip work at each
    boundary and a worker that spends 0.2 s of CPU on each publish: the publishes thin out to
    one every 512 steps, and the trainer's parameters are copied at those steps only."""
    from peer.cadence_gauges import read
    from peer.protocol_time import ProtocolTime

    now, worker_cpu, metrics, told = [0.0], [0.0], Metrics(), []
    ticks = iter(range(10**6))
    pending = PendingPublish()
    hook = BoundaryHook(Mixer(GossipConfig(swarm="t")), ViewSlot(MixView(torch.zeros(4))), pending,
                        lambda step, due: told.append((step, due)), metrics, GossipConfig(swarm="t").publish_cadence(),
                        lambda: now[0], protocol=ProtocolTime(lambda: next(ticks) * 0.00005, lambda: worker_cpu[0]))
    tr, copied_at = CountingFlat(), []
    for k in range(1, 6000):
        now[0] = 0.01 * k
        tr.step_count = k
        before = tr.copies
        hook(tr, StepStats(k, 0.5, 8))
        if tr.copies > before:
            copied_at.append(k)
        if pending.needs_job() and pending.take() is not None:  # the worker publishes the copy
            worker_cpu[0] += 0.2
            pending.finished()
    assert hook.cadence.every == 512
    assert copied_at == [step for step, due in told if due]
    assert [b - a for a, b in zip(copied_at, copied_at[1:])][:10] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert metrics.get("publish_every_steps") == 512 and metrics.get("publish_budget") == 0.05
    reason = read(metrics).reason()
    assert re.fullmatch(r"budget 5%: protocol 0\.2\d s per publish, step 0\.01 s → every 512 steps", reason)


def test_a_mix_is_added_a_span_of_whole_tensors_at_a_time_with_the_same_bits():
    """An add-in-place trainer is handed the mix's change in spans of whole parameter tensors
    (`MIX_SPANS` of the model, or one tensor when larger): no float32 change of the whole model is
    built, and the parameters end bit for bit where the change added whole would put them."""
    from peer.boundary import MIX_SPANS
    from peer.core.view import CopyView

    class Tensors(Flat):
        capabilities = Capabilities(add_in_place=True)

        def __init__(self, sizes: list[int]) -> None:
            super().__init__()
            self.x, self.sizes, self.spans = torch.zeros(sum(sizes)), sizes, []

        def param_spec(self):
            return {f"p{i}": ((n,), "float32") for i, n in enumerate(self.sizes)}

        def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
            self.spans.append((start, delta.numel()))
            self.x[start:start + delta.numel()] += delta

    sizes = [1000] * 200 + [50_000, 7, 11]  # many small tensors, one far larger than 1/32 of the model
    n = sum(sizes)
    cfg = GossipConfig(swarm="t", staleness="constant,gamma=0.5", clip=False, partner_steps=0.0)
    g = torch.Generator().manual_seed(0)
    public = torch.zeros(n)
    copies = tuple(CopyView(bytes([j]) * 32, 1, torch.randn(n, generator=g), 0.0, pulled=1) for j in (1, 2))
    view = MixView(public, copies, 0.0, 0.0)
    tr = Tensors(sizes)
    hook = BoundaryHook(Mixer(cfg, 2), ViewSlot(view), PendingPublish(), lambda step, due: None, Metrics(),
                        cfg.publish_cadence(), lambda: 0.0)
    tr.step_count = 1
    hook(tr, StepStats(1, 0.5, 8))
    whole, report = Mixer(cfg, 2).mix(None, view, 1, 0.0)
    assert report.mixed == 2 and torch.equal(tr.x, whole)
    starts = [s for s, _ in tr.spans]
    assert starts == sorted(starts) and sum(length for _, length in tr.spans) == n
    edges = set(torch.tensor(sizes).cumsum(0).tolist()) | {0}
    assert all(s in edges and s + length in edges for s, length in tr.spans)  # whole tensors only
    assert max(length for _, length in tr.spans) == 50_000  # the largest tensor alone, not the model
    assert len(tr.spans) <= 2 * MIX_SPANS + 1 and 7000 in {length for _, length in tr.spans}  # small ones grouped
