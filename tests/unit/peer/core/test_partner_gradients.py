"""Partner gradients through the real node, the step boundary and a trainer's blend: what an
Adam-type peer sends, what it takes from a partner it pulled, and how it steps on it
(peer.core.partner_steps, peer.partner_gradients)."""

import pytest
import torch

from peer.boundary import BoundaryHook, PendingPublish
from peer.core.cadence import PublishCadence
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.core.view import MixView, ViewSlot
from peer.metrics import Metrics
from peer.partner_gradients import GradientBlend
from peer.trainer import Capabilities, StepStats
from protocol import Identity
from tests.unit.exchange_helpers import exchange

DIM, NOW = 8, 1_000_000.0
SPEC = {"w": ((DIM,), "float32")}
W = 0.3


def node(i: int, **cfg) -> GossipNode:
    gossip = GossipConfig(swarm="t", compression="identity", partner_steps=0.0, partner_gradients=W,
                          partner_step_clip=2.0, **cfg)
    return GossipNode(gossip, Identity.generate(bytes([i + 1]) * 32), SPEC, torch.zeros(DIM), now=NOW,
                      metrics=Metrics())


def trained(n: GossipNode, gradient: torch.Tensor, steps: int = 1) -> None:
    """`n` took `steps` steps, each on `gradient`, and publishes (its parameters moved a little)."""
    n.publish(n.last_x + 0.01, n.step + steps, NOW, gradient * steps)


def paired(pulled_by: GossipNode, partner: GossipNode) -> None:
    for _ in range(3):
        exchange(pulled_by, partner, NOW)
    assert pulled_by.neighbours[partner.identity.public_key].pulled > 0


def test_a_pulled_partners_mean_gradient_reaches_our_inbox_at_its_weight():
    a, b = node(0), node(1)
    trained(b, torch.full((DIM,), 1.0))  # b's own mean gradient per step sets its bound: 2 × 2.83
    trained(a, torch.full((DIM,), 5.0))
    paired(b, a)
    assert b.partner_steps.inbox.take() is None  # the first pull only marks where to start
    g = torch.linspace(-1.0, 1.0, DIM)
    trained(a, g, steps=3)  # three steps on g: the frame carries their sum, 3g
    exchange(b, a, NOW)
    taken, weight = b.partner_steps.inbox.take()
    assert torch.allclose(taken, W * g) and weight == W  # the mean over the steps its copy says it took
    assert b.metrics.get("partner_steps_taken_total") == 1


def test_a_partners_gradient_is_bounded_by_our_own_whatever_step_count_it_claims():
    a, b = node(0), node(1)
    trained(b, torch.full((DIM,), 1.0))
    paired(b, a)
    a.publish(a.last_x + 0.01, a.step, NOW, torch.full((DIM,), 1e6))  # a huge sum, and no step taken
    exchange(b, a, NOW)
    taken, weight = b.partner_steps.inbox.take()
    bound = 2.0 * torch.full((DIM,), 1.0).norm()  # partner_step_clip × our median mean gradient norm
    liar = torch.full((DIM,), 1e6).norm()  # its sum over the one step it is counted for
    # shortened as a copy past the clipping radius pulls (clip_power): the farther, the less
    assert torch.isclose(taken.norm(), W * bound * (bound / liar) ** (b.cfg.clip_power - 1)) and weight == W
    assert b.metrics.get("partner_steps_clipped_total") == 1


def test_gradients_and_steps_never_stand_in_for_each_other():
    """A peer that adds partners' steps keeps no gradient sum of a neighbour, and a peer that blends
    gradients keeps no steps sum: each frame's second tensor names what it is."""
    grads = node(0)
    steps = GossipNode(GossipConfig(swarm="t", compression="identity", partner_steps=0.5), Identity.generate(bytes([9]) * 32),
                       SPEC, torch.zeros(DIM), now=NOW)
    trained(grads, torch.ones(DIM))
    steps.publish(torch.ones(DIM), 1, NOW, torch.zeros(DIM))
    paired(steps, grads)
    paired(grads, steps)
    for taker, sender in ((steps, grads), (grads, steps)):
        copy = taker.neighbours[sender.identity.public_key].copy
        assert copy.x_hat is not None and copy.steps_hat is None
        assert taker.partner_steps.inbox.take() is None
    assert grads.partner_steps.tensor == "grad" and steps.partner_steps.tensor == "step"


def test_the_settings_keep_partner_gradients_only_for_trainers_that_blend_and_whose_steps_do_not_add():
    cfg = GossipConfig(swarm="t", partner_gradients=W)
    adam = cfg.for_trainer(False, True)
    assert adam.partner_steps == 0 and adam.partner_gradients == W
    assert adam.partner_steps_args() == dict(weight=W, clip_multiplier=cfg.partner_step_clip,
                                             gradients_hold=cfg.partner_gradient_hold)
    sgd = cfg.for_trainer(True, True)
    assert sgd.partner_steps == cfg.partner_steps and sgd.partner_gradients == 0
    assert sgd.partner_steps_args()["gradients_hold"] == 0
    neither = cfg.for_trainer(False, False)
    assert neither.partner_steps == neither.partner_gradients == 0 and neither.partner_steps_args()["weight"] == 0
    for bad in (dict(partner_gradients=1.5), dict(partner_gradients=-0.1), dict(partner_gradient_hold=0)):
        with pytest.raises(ValueError, match="partner_gradient"):
            GossipConfig(swarm="t", **bad)


class BlendingTrainer:
    """Records what the boundary asks of a trainer with Capabilities(partner_gradients=True)."""

    capabilities = Capabilities(partner_gradients=True)

    def __init__(self) -> None:
        self.x, self.step_count, self.sums = torch.zeros(4), 0, 0
        self.blends: list[tuple[torch.Tensor | None, float]] = []

    def get_flat_params(self) -> torch.Tensor:
        return self.x.clone()

    def gradient_sum(self) -> torch.Tensor:
        self.sums += 1
        return torch.full((4,), float(self.sums))

    def blend_partner_gradient(self, gradient: torch.Tensor | None, weight: float) -> None:
        self.blends.append((gradient, weight))

    def set_step_scale(self, scale: float) -> None:
        pass


def test_the_boundary_hands_a_taken_gradient_to_the_trainer_for_at_most_hold_steps():
    cfg = GossipConfig(swarm="t", partner_steps=0.0, partner_gradients=W, partner_gradient_hold=2)
    n = GossipNode(cfg, Identity.generate(bytes([3]) * 32), {"w": ((4,), "float32")}, torch.zeros(4), now=NOW)
    pending = PendingPublish()
    hook = BoundaryHook(Mixer(cfg), ViewSlot(MixView(torch.zeros(4))), pending, lambda step, due: None, Metrics(),
                        PublishCadence(1, 0.0), lambda: 0.0, n.partner_steps.taken())
    tr = BlendingTrainer()
    n.partner_steps.inbox.add(torch.ones(4), W)
    n.partner_steps.inbox.add(torch.full((4,), 2.0), W)  # two partners taken since the last boundary
    for step in range(1, 5):
        tr.step_count = step
        hook(tr, StepStats(step, 0.5, 8))
    (g, w), (none, zero) = tr.blends
    assert torch.equal(g, torch.full((4,), 3.0)) and w == pytest.approx(2 * W)
    assert none is None and zero == 0.0  # taken back after two steps
    _, step, beside = pending.take()
    # four hand-overs coalesced into one publish: the trainer's four gradient sums add up
    assert step == 4 and torch.equal(beside, torch.full((4,), 1.0 + 2.0 + 3.0 + 4.0))


def test_the_blend_steps_on_the_weighted_mean_of_our_gradient_and_the_partners():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    params = list(model.parameters())
    blend = GradientBlend()
    numel = sum(p.numel() for p in params)
    assert torch.equal(blend.gradient_sum(numel), torch.zeros(numel))  # the first call starts the sum
    x = torch.randn(5, 3)

    def grads() -> torch.Tensor:
        model.zero_grad()
        model(x).square().sum().backward()
        return torch.cat([p.grad.reshape(-1) for p in params])

    own = grads()
    partner = torch.linspace(-1.0, 1.0, numel)
    blend.blend(0.5 * partner, 0.5)
    grads()
    blend.after_backward(params)
    blended = torch.cat([p.grad.reshape(-1) for p in params])
    assert torch.allclose(blended, (own + 0.5 * partner) / 1.5)
    blend.blend(None, 0.0)
    grads()
    blend.after_backward(params)
    assert torch.allclose(torch.cat([p.grad.reshape(-1) for p in params]), own)  # its own gradient again
    assert torch.allclose(blend.gradient_sum(numel), 2 * own)  # raw gradients, never the blend
    with pytest.raises(ValueError, match="weight"):
        blend.blend(partner, 0.0)
