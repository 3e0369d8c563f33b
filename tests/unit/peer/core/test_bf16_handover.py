"""Where the node keeps no parameters, a publish is handed a stochastically rounded bfloat16 copy
of them (`GossipConfig.handover_dtype`): half the memory and device-to-host transfer of a float32
one. x̂ is bfloat16 anyway, so the copies still agree bit for bit and x̂ follows the parameters
as closely as with a float32 hand-over; a rounding that is not unbiased would leave it behind."""

from __future__ import annotations

import pytest
import torch

from async_opt import stochastic_round_bf16
from peer.boundary import BoundaryHook, PendingPublish
from peer.core.cadence import PublishCadence
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.view import MixView, ViewSlot
from peer.metrics import Metrics
from peer.trainer import StepStats
from tests.unit.exchange_helpers import push
from tests.unit.peer.core.test_copy_precision import NOW, node
from tests.unit.peer.test_boundary import Flat


def test_the_hand_over_is_bfloat16_only_where_the_node_keeps_no_parameters() -> None:
    base = GossipConfig(swarm="t", partner_steps=0.0)
    assert base.handover_bfloat16
    for changed in ({"partner_steps": 0.7}, {"copy_dtype": "float32"}, {"handover_dtype": "float32"},
                    {"error_feedback": False}):
        assert not GossipConfig(**{"swarm": "t", "partner_steps": 0.0, **changed}).handover_bfloat16, changed
    with pytest.raises(ValueError, match="handover_dtype must be one of"):
        GossipConfig(swarm="t", handover_dtype="float16")


@pytest.mark.parametrize("handover, dtype", [("bfloat16", torch.bfloat16), ("float32", torch.float32)])
def test_the_boundary_hands_a_publish_the_copy_its_config_names(handover: str, dtype: torch.dtype) -> None:
    cfg = GossipConfig(swarm="t", partner_steps=0.0, handover_dtype=handover)
    pending = PendingPublish()
    hook = BoundaryHook(Mixer(cfg), ViewSlot(MixView(torch.zeros(4))), pending, lambda step, due: None, Metrics(),
                        PublishCadence(1, 0.0), lambda: 0.0)
    tr = Flat()
    tr.step_count = 1
    hook(tr, StepStats(1, 0.5, 8))
    assert pending.take()[0].dtype == dtype


def _follow(xs: list[torch.Tensor], rounding: str, seed: int, compression: str) -> tuple[float, float, bool]:
    """After a walk published every step: how far x̂ is from x (‖x − x̂‖ / ‖x‖), how one-sided
    (mean sign(x)·(x − x̂) over mean |x − x̂|: 0 when x̂ errs either way alike, 1 when always
    toward zero), and whether a receiver's copy of x̂ was the sender's bit for bit at every step."""
    g = torch.Generator().manual_seed(seed)
    cfg = {"partner_steps": 0.0, "compression": compression}
    sender, receiver = node(0, xs[0], **cfg), node(1, xs[0], **cfg)
    same = True
    for step, x in enumerate(xs, start=1):
        if rounding == "float32":
            given = x.clone()
        elif rounding == "stochastic":
            given = stochastic_round_bf16(x, torch.empty_like(x, dtype=torch.bfloat16), g)
        else:  # toward zero: a biased rounding, the control
            given = (x.view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)
        sender.publish(given, step, NOW + step, scratch=True)
        push(sender, receiver, NOW + step)
        copy = receiver.neighbours[sender.identity.public_key].copy.x_hat
        same &= torch.equal(copy.view(torch.int16), sender.public.x_hat.view(torch.int16))
    x = xs[-1]
    error = x - sender.public.x_hat.float()
    return float(error.norm() / x.norm()), float((torch.sign(x) * error).mean() / error.abs().mean()), same


@pytest.mark.parametrize("compression", ["topk:0.1+int8", "int8"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_bfloat16_hand_over_keeps_the_public_copy_as_close_and_as_unbiased_as_a_float32_one(
        compression: str, seed: int) -> None:
    from tests.unit.peer.core.test_copy_precision import walk

    xs = walk(80, seed)
    exact = _follow(xs, "float32", seed, compression)
    rounded = _follow(xs, "stochastic", seed, compression)
    truncated = _follow(xs, "toward-zero", seed, compression)
    assert exact[2] and rounded[2] and truncated[2]  # every copy agrees, whatever it was handed
    # the rounding adds at most a bfloat16 step of noise: within a half of float32's distance
    assert rounded[0] <= 1.5 * exact[0], (rounded, exact)
    assert abs(rounded[1]) < 0.1 and abs(exact[1]) < 0.1, (rounded, exact)
    assert truncated[1] > 0.3, truncated  # the control: a biased rounding leaves x̂ on one side
