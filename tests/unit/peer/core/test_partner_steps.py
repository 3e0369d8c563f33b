"""Partner steps through the real node and step boundary: who may move us, by how much, and what
counts as our own steps (peer.core.partner_steps)."""

import pytest
import torch

from peer.boundary import BoundaryHook, PendingPublish
from peer.core.cadence import PublishCadence
from peer.core.gossip_config import GossipConfig
from peer.core.ingest import MAX_GAP_UPDATES, open_frame
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.core.partner_steps import PartnerSteps
from peer.metrics import Metrics
from peer.trainer import Capabilities, StepStats
from protocol import (FrameHeader, FrameKind, FrameRefused, Identity, IdentityCodec, RefusalReason, TensorSpec,
                      encode_frame, flat_model_spec)
from tests.unit.exchange_helpers import exchange

DIM, NOW = 8, 1_000_000.0
SPEC = {"w": ((DIM,), "float32")}


def node(i: int, **cfg) -> GossipNode:
    gossip = GossipConfig(swarm="t", compression="identity", partner_steps=0.5, partner_step_clip=2.0, **cfg)
    return GossipNode(gossip, Identity.generate(bytes([i + 1]) * 32), SPEC, torch.zeros(DIM), now=NOW,
                      metrics=Metrics())


def step_to(n: GossipNode, own: torch.Tensor) -> None:
    """`n` trained by `own` since its last publish (nothing came from outside) and publishes."""
    n.publish(n.last_x + own, n.step + 1, NOW, torch.zeros(DIM))


def paired(pulled_by: GossipNode, partner: GossipNode) -> None:
    """`pulled_by` has pulled `partner` (ticket, its snapshot, then news of what it holds): the
    partner is one it chose, and sends it updates from now on."""
    for _ in range(3):
        exchange(pulled_by, partner, NOW)
    assert pulled_by.neighbours[partner.identity.public_key].pulled > 0


def test_the_steps_of_a_partner_we_pull_reach_our_inbox_at_the_weight():
    a, b = node(0), node(1)
    step_to(b, torch.full((DIM,), 0.1))  # b's own step norm sets its bound: 2 × 0.28 per period
    step_to(a, torch.full((DIM,), 0.3))
    paired(b, a)
    assert b.partner_steps.inbox.take() is None  # the first pull only marks where to start
    own = torch.linspace(-0.1, 0.1, DIM)
    step_to(a, own)
    exchange(b, a, NOW)
    assert torch.allclose(b.partner_steps.inbox.take(), 0.5 * own)
    assert b.metrics.get("partner_steps_taken_total") == 1


def test_pushed_steps_wait_for_our_next_pull_and_a_neighbour_we_never_chose_moves_nothing():
    a, b, c = node(0), node(1), node(2)
    step_to(b, torch.full((DIM,), 0.1))
    paired(b, a)
    step_to(a, torch.full((DIM,), 0.05))
    step_to(c, torch.full((DIM,), 0.05))
    exchange(a, b, NOW)  # a pulls b: a's new update reaches b in a's request
    paired(c, b)
    step_to(c, torch.full((DIM,), 0.05))
    exchange(c, b, NOW)  # c pushes its update at b, which never chose c
    for n in (a, c):  # both updates reached b's copies
        assert b.neighbours[n.identity.public_key].copy.seq == n.public.seq
    assert b.partner_steps.inbox.take() is None
    exchange(b, a, NOW)  # b's own pull of a: nothing new in the answer, a's waiting steps are taken
    assert torch.allclose(b.partner_steps.inbox.take(), torch.full((DIM,), 0.025))


def test_a_liars_steps_are_shortened_to_our_own_bound():
    a, b = node(0), node(1)
    mine = torch.full((DIM,), 0.1)
    step_to(b, mine)
    paired(b, a)
    step_to(a, torch.full((DIM,), 1e6))
    exchange(b, a, NOW)
    taken = b.partner_steps.inbox.take()
    bound = 2.0 * mine.norm()  # the clip multiple × our median step norm, for one period
    liar = torch.full((DIM,), 1e6).norm()
    # clip_power 2: as a copy far past the clipping radius pulls, the farther the less
    assert torch.isclose(taken.norm(), 0.5 * bound * bound / liar) and (taken > 0).all()
    assert b.metrics.get("partner_steps_clipped_total") == 1


def test_our_steps_exclude_what_came_from_outside_and_the_codec_loses_nothing_for_good():
    steps = PartnerSteps(weight=0.5, clip_multiplier=2.0, window=4)
    last, x = torch.zeros(4), torch.tensor([1.0, 2.0, 3.0, 4.0])
    outside = torch.tensor([0.5, 0.0, 0.0, 0.0])
    carried = steps.to_send(x, last, outside)
    assert torch.equal(carried, torch.tensor([0.5, 2.0, 3.0, 4.0]))
    kept = torch.tensor([0.0, 0.0, 3.0, 4.0])  # what a top-2 codec sends
    steps.sent(carried, kept)
    later = steps.to_send(x, x, torch.zeros(4))  # no new steps: the residual goes out next
    assert torch.equal(kept + later, torch.tensor([0.5, 2.0, 3.0, 4.0]))
    assert steps.to_send(x, last, None) is None  # the caller could not say what was its own
    assert PartnerSteps(0.0, 2.0, 4).to_send(x, last, outside) is None  # off


def test_a_steps_sum_that_overflows_is_left_out_of_snapshots():
    """Each frame's steps are finite, but a liar's sum may not be: its snapshots then carry none
    (a snapshot with a non-finite tensor could not even be built)."""
    steps = PartnerSteps(weight=0.5, clip_multiplier=2.0, window=4)
    assert torch.equal(steps.for_snapshot(2), torch.zeros(2))  # before our first publish
    for _ in range(2):
        steps.sent(torch.full((2,), 3e38), torch.full((2,), 3e38))
    assert steps.for_snapshot(2) is None
    assert PartnerSteps(weight=0.0, clip_multiplier=2.0, window=4).for_snapshot(2) is None  # off


def test_adopting_a_state_forgets_every_step_sent_or_taken():
    a, b = node(0), node(1)
    step_to(b, torch.full((DIM,), 0.1))
    paired(b, a)
    step_to(a, torch.full((DIM,), 0.05))
    exchange(a, b, NOW)  # waits at b
    b.adopt(torch.ones(DIM), 7)
    exchange(b, a, NOW)
    assert b.partner_steps.inbox.take() is None  # and b knows no own step norm yet: nothing may be added


def test_a_gap_filled_by_a_snapshot_keeps_every_step_it_covers():
    """At many peers a partner is pulled seldom and its gap is filled by a snapshot: the snapshot
    carries its steps sum, so the steps of the whole gap are taken, not lost with the updates."""
    a, b = node(0), node(1)
    step_to(b, torch.full((DIM,), 0.1))
    paired(b, a)
    for _ in range(MAX_GAP_UPDATES + 1):  # more than one bundle carries as updates
        step_to(a, torch.full((DIM,), 0.001))
    exchange(b, a, NOW)
    assert b.metrics.get("snapshots_received_total") == 2  # the first copy, then this gap
    taken = b.partner_steps.inbox.take()
    assert torch.allclose(taken, torch.full((DIM,), 0.5 * 0.001 * (MAX_GAP_UPDATES + 1)))
    assert torch.equal(b.neighbours[a.identity.public_key].copy.steps_hat, a.partner_steps.published)


def test_a_peer_that_takes_no_partner_steps_keeps_none_of_a_neighbours():
    """A neighbour's steps sum would cost a parameter-sized vector beside its copy: a peer with
    partner steps off (an Adam trainer) keeps the copy and drops the sum."""
    a = node(0)
    off = GossipNode(GossipConfig(swarm="t", compression="identity", partner_steps=0), Identity.generate(bytes([9]) * 32),
                     SPEC, torch.zeros(DIM), now=NOW)
    step_to(a, torch.full((DIM,), 0.1))
    paired(off, a)
    step_to(a, torch.full((DIM,), 0.1))
    exchange(off, a, NOW)
    copy = off.neighbours[a.identity.public_key].copy
    assert torch.allclose(copy.x_hat.float(), torch.full((DIM,), 0.2), atol=1e-3) and copy.steps_hat is None


def test_frames_without_steps_still_count_and_frames_with_other_tensors_are_refused():
    a, b = node(0), node(1)
    plain = GossipNode(GossipConfig(swarm="t", compression="identity", partner_steps=0), a.identity, SPEC, torch.zeros(DIM), now=NOW)
    plain.publish(torch.ones(DIM), 1, NOW, torch.zeros(DIM))  # partner steps off: no second tensor
    paired(b, plain)
    copy = b.neighbours[plain.identity.public_key].copy
    assert torch.equal(copy.x_hat, torch.ones(DIM)) and copy.steps_hat is None
    for kind, names in ((FrameKind.SNAPSHOT, ("step", "vector")), (FrameKind.SNAPSHOT, ("vector", "delta")),
                        (FrameKind.UPDATE, ("delta", "step", "vector"))):
        header = FrameHeader(swarm="t", fingerprint=b.fingerprint, sender=a.identity.public_key, kind=kind,
                             seq=1, step=1, timestamp=NOW, codec="identity", extra={"epoch": a.epoch},
                             tensors=tuple(TensorSpec(name, (DIM,), "float32") for name in names))
        packed = {f"{name}/{k}": v for name in names for k, v in IdentityCodec().compress(torch.ones(DIM))[0].items()}
        try:
            open_frame(encode_frame(a.identity, header, packed, b.limits), b.policy, NOW, a.epoch)
        except FrameRefused as exc:
            assert exc.reason is RefusalReason.BAD_HEADER and kind.value in str(exc)
        else:
            raise AssertionError(f"a {kind.value} frame with tensors {names} was taken")
    assert flat_model_spec(DIM)["step"] == ((DIM,), "float32")


class AddingTrainer:
    capabilities = Capabilities(add_in_place=True)

    def __init__(self) -> None:
        self.x, self.step_count = torch.zeros(4), 0

    def get_flat_params(self) -> torch.Tensor:
        return self.x.clone()

    def add_to_flat_params(self, delta: torch.Tensor, start: int = 0) -> None:
        self.x[start:start + delta.numel()] += delta

    def set_step_scale(self, scale: float) -> None:
        pass


def test_the_boundary_applies_taken_steps_and_reports_them_as_outside_until_the_next_hand_over():
    """A copy waits for the worker at step 2, so none is handed over then: what came from outside at
    step 2 goes with the next copy (step 3), not lost and not counted twice."""
    steps = PartnerSteps(weight=0.5, clip_multiplier=2.0, window=4)
    pending = PendingPublish()
    cfg = GossipConfig(swarm="t", partner_steps=0.5)
    from peer.core.view import MixView, ViewSlot

    hook = BoundaryHook(Mixer(cfg), ViewSlot(MixView(torch.zeros(4))), pending, lambda step, due: None, Metrics(),
                        PublishCadence(1, 0.0), lambda: 0.0, steps.taken())
    tr = AddingTrainer()
    steps.inbox.add(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    tr.step_count, tr.x = 1, tr.x + 0.25  # the trainer's own step
    hook(tr, StepStats(1, 0.5, 8))
    steps.inbox.add(torch.tensor([0.0, 2.0, 0.0, 0.0]))
    tr.step_count = 2
    hook(tr, StepStats(2, 0.5, 8))  # the first copy is not published yet: no second one
    x, step, outside = pending.take()
    assert step == 1 and torch.equal(x, torch.tensor([1.25, 0.25, 0.25, 0.25]))
    assert torch.equal(outside, torch.tensor([1.0, 0.0, 0.0, 0.0]))  # the trainer's own step is not outside
    pending.finished()
    tr.step_count = 3
    hook(tr, StepStats(3, 0.5, 8))
    x, step, outside = pending.take()
    assert step == 3 and torch.equal(x, torch.tensor([1.25, 2.25, 0.25, 0.25]))
    assert torch.equal(outside, torch.tensor([0.0, 2.0, 0.0, 0.0]))


def test_partner_steps_only_for_trainers_whose_steps_add():
    """Adam-type steps are normalised per coordinate: adding a partner's multiplies the step size
    (docs/benchmarks/replica-loss.md#a-partners-gradients-under-adam), so those trainers keep
    them off and train with the measured multiplier."""
    from simnet.world.mlp_trainer import MLPTrainer
    from peer.local.toy_trainer import LeastSquaresTrainer

    cfg = GossipConfig(swarm="t")
    assert cfg.for_trainer(True) is cfg and cfg.partner_steps > 0
    off = cfg.for_trainer(False)
    assert off.partner_steps == 0 and off.step_scale_rule().max_scale == cfg.step_scale_max
    assert cfg.step_scale_rule().max_scale == 1.0  # with partner steps the multiplier stays 1
    assert MLPTrainer.capabilities.additive_steps and LeastSquaresTrainer.capabilities.additive_steps  # plain SGD
    assert not Capabilities().additive_steps  # a trainer says so, or it is taken as Adam-like


@pytest.mark.parametrize("every, per_period, weight", [(1, True, 0.7), (64, True, 0.7 / 64), (64, False, 0.7)])
def test_a_partners_steps_weigh_per_period(every, per_period, weight):
    """A partner's H steps reach us in its copy too; per period, its steps are taken at
    `partner_steps` / H, so at H = 1 nothing changes and at H = 64 they are not added 64 times over."""
    cfg = GossipConfig(swarm="t", partner_steps=0.7, gossip_every=every, per_period=per_period)
    built = GossipNode(cfg, Identity.generate(bytes([1]) * 32), SPEC, torch.zeros(DIM), now=NOW, metrics=Metrics())
    assert built.partner_steps.weight == pytest.approx(weight)


def test_the_period_is_the_one_we_publish_at_not_the_setting():
    """`gossip_every` 1, but the worker lets us publish only every 10 steps (as at a large model):
    the weight is per 10 steps. The period is our machine's, so adopting a state keeps it."""
    n = node(0, gossip_every=1)
    for k in range(0, 50, 10):
        n.publish(n.last_x + 0.01, k, NOW, torch.zeros(DIM))
    assert n.partner_steps.weight == pytest.approx(0.5 / 10)
    n.adopt(torch.zeros(DIM), 900)
    n.publish(n.last_x + 0.01, 910, NOW, torch.zeros(DIM))
    assert n.partner_steps.weight == pytest.approx(0.5 / 10)
