"""Copies held in bfloat16 (`GossipConfig.copy_dtype`): half the memory of each, and still the
same bits on the sender and every receiver, with what the rounding leaves out sent later."""

from __future__ import annotations

import pytest
import torch

from async_opt import NeighbourCopy, PublicCopy
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from protocol import Identity, make_update_frame
from tests.unit.exchange_helpers import exchange, push

NOW = 1_000_000.0
DIM = 4096


def node(i: int, x: torch.Tensor, **cfg) -> GossipNode:
    cfg = GossipConfig(**{"swarm": "t", "staleness": "constant", "partner_steps": 0.0, **cfg})
    return GossipNode(cfg, Identity.generate(bytes([i + 1]) * 32), {"w": ((x.numel(),), "float32")}, x, now=NOW)


def walk(steps: int, seed: int) -> list[torch.Tensor]:
    """Parameters along a training run: small steps, as an optimiser makes them, from weights ~0.02."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(DIM, generator=g) * 0.02
    out = []
    for _ in range(steps):
        x = x - 1e-4 * torch.randn(DIM, generator=g)
        out.append(x.clone())
    return out


@pytest.mark.parametrize("compression", ["topk:0.1+int8", "int8", "identity"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_receivers_bfloat16_copy_is_the_senders_bit_for_bit(compression, seed):
    xs = walk(60, seed)
    sender, receiver = node(0, xs[0], compression=compression), node(1, xs[0], compression=compression)
    for step, x in enumerate(xs, start=1):
        sender.publish(x, step, NOW + step)
        push(sender, receiver, NOW + step)
        copy = receiver.neighbours[sender.identity.public_key].copy
        assert copy.x_hat.dtype == torch.bfloat16 and sender.public.x_hat.dtype == torch.bfloat16
        assert torch.equal(copy.x_hat.view(torch.int16), sender.public.x_hat.view(torch.int16)), step


def test_error_feedback_carries_the_rounding_so_the_copy_tracks_the_parameters():
    """x̂ in bfloat16 stays within bfloat16's rounding of x: the rounding is residual, sent later.
    The control, each step's change rounded into a bfloat16 copy and the rounding dropped, falls
    behind: most steps are smaller than half a bfloat16 ulp of the weights."""
    xs = walk(400, 3)
    ours = PublicCopy(xs[0], dtype=torch.bfloat16)
    for x in xs:
        ours.publish(x, lambda v: v)  # an exact codec: all that is left out is the rounding
    last, moved = xs[-1], (xs[-1] - xs[0]).norm()
    assert float((last - ours.x_hat.float()).abs().max()) <= 2.0 ** -8 * float(last.abs().max())
    control, previous = xs[0].to(torch.bfloat16), xs[0]
    for x in xs:
        control, previous = (control.float() + (x - previous)).to(torch.bfloat16), x
    tracked = float((last - ours.x_hat.float()).norm() / moved)
    lost = float((last - control.float()).norm() / moved)
    assert tracked < 0.05 and lost > 10 * tracked


def test_a_receiver_follows_the_senders_precision_whatever_its_own():
    x = torch.randn(DIM) * 0.02
    exact_sender, half_receiver = node(0, x, copy_dtype="float32"), node(1, x, copy_dtype="bfloat16")
    half_sender, exact_receiver = node(2, x, copy_dtype="bfloat16"), node(3, x, copy_dtype="float32")
    for step in (1, 2, 3):
        moved = x + step * 1e-3
        for s, r in ((exact_sender, half_receiver), (half_sender, exact_receiver)):
            s.publish(moved, step, NOW + step)
            push(s, r, NOW + step)
    got = half_receiver.neighbours[exact_sender.identity.public_key].copy.x_hat
    assert got.dtype == torch.float32 and torch.equal(got, exact_sender.public.x_hat)
    got = exact_receiver.neighbours[half_sender.identity.public_key].copy.x_hat
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), half_sender.public.x_hat.view(torch.int16))


def test_the_snapshot_of_a_bfloat16_copy_is_half_the_bytes():
    x = torch.randn(DIM) * 0.02
    sizes = {}
    for dtype in ("bfloat16", "float32"):
        sender, receiver = node(0, x, copy_dtype=dtype), node(1, x)
        sender.publish(x + 1e-3, 1, NOW)
        exchange(receiver, sender, NOW)  # a first contact: a ticket, no snapshot
        body, _ = sender.handle_request(receiver.build_request(sender.identity.public_key, NOW), NOW,
                                        verified={receiver.identity.public_key})
        sizes[dtype] = len(body)
    assert 0.45 < sizes["bfloat16"] / sizes["float32"] < 0.55


def test_the_state_of_a_bfloat16_peer_is_its_public_copy_and_a_float32_peer_serves_its_parameters():
    x = torch.randn(DIM) * 0.02
    moved = x + torch.randn(DIM) * 1e-3
    half, exact, joiner = node(0, x, compression="topk:0.1+int8"), node(1, x, copy_dtype="float32"), node(2, x)
    for peer in (half, exact):
        peer.publish(moved, 5, NOW)
    got, step = joiner.read_state(half.state_frame(NOW), NOW)
    assert step == 5 and half.last_x is None
    assert torch.equal(got, half.public.x_hat.float())  # x̂, exactly: what every neighbour holds of it
    got, _ = joiner.read_state(exact.state_frame(NOW), NOW)
    assert torch.equal(got, moved)


def test_updates_into_a_bfloat16_copy_round_once_not_twice():
    """Summed in float32 and rounded once: rounding the update to bfloat16 first, then the sum,
    lands elsewhere for some entries (double rounding) and would still agree on both sides, but is
    the less exact of the two."""
    g = torch.Generator().manual_seed(0)
    base = (torch.randn(DIM, generator=g) * 0.02).to(torch.bfloat16)
    update = torch.randn(DIM, generator=g) * 3e-4
    frame, recon = make_update_frame(Identity.generate(b"\x01" * 32), swarm="t", fingerprint="f", seq=1, step=1,
                                     timestamp=NOW, codec="identity", delta=update)
    copy = NeighbourCopy()
    copy.set_snapshot(0, base, 0)
    copy.apply_update(1, recon, 1)
    once = (base.float() + update).to(torch.bfloat16)
    twice = base + update.to(torch.bfloat16)
    assert torch.equal(copy.x_hat.view(torch.int16), once.view(torch.int16))
    assert not torch.equal(once, twice)


def test_a_gap_is_filled_with_updates_only_while_they_are_smaller_than_our_snapshot():
    """Three int8 updates (about 3 bytes a parameter) outweigh a bfloat16 snapshot (2): it goes in
    their place. The control, a float32 peer, whose snapshot takes 4, sends the updates."""
    x = torch.randn(DIM) * 0.02
    sent = {}
    for dtype in ("bfloat16", "float32"):
        sender = node(0, x, copy_dtype=dtype, compression="int8")
        receiver = GossipNode(sender.cfg, Identity.generate(b"\x07" * 32), {"w": ((DIM,), "float32")}, x, now=NOW,
                              metrics=Metrics(process=False))
        sender.publish(x + 1e-3, 1, NOW)
        push(sender, receiver, NOW)  # the receiver holds seq 1, and told the sender so
        for step in (2, 3, 4):
            sender.publish(x + step * 1e-3, step, NOW + step)
        push(sender, receiver, NOW + 4)
        copy = receiver.neighbours[sender.identity.public_key].copy
        assert copy.seq == 4 and torch.equal(copy.x_hat, sender.public.x_hat)
        sent[dtype] = (receiver.metrics.total("snapshots_received_total"), receiver.metrics.total("updates_applied_total"))
    assert sent["bfloat16"] == (2, 0) and sent["float32"] == (1, 3)  # the first push: a snapshot
