"""Public copies (CHOCO-SGD error feedback) and neighbour reconstructions: exact values."""

from __future__ import annotations

import pytest
import torch

from async_opt import NeighbourCopy, PublicCopy


def top1(v: torch.Tensor) -> torch.Tensor:
    """Keep the largest-magnitude entry (a top-k compressor with k=1)."""
    out = torch.zeros_like(v)
    i = int(v.abs().argmax())
    out[i] = v[i]
    return out


def topk_frac(frac: float):  # type: ignore[no-untyped-def]
    def compress(v: torch.Tensor) -> torch.Tensor:
        k = max(1, int(frac * v.numel()))
        idx = v.abs().topk(k).indices
        out = torch.zeros_like(v)
        out[idx] = v[idx]
        return out

    return compress


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def test_public_copy_starts_as_a_copy_of_x0() -> None:
    x0 = t(1, 2, 3)
    pc = PublicCopy(x0)
    assert torch.equal(pc.x_hat, x0) and pc.seq == 0
    x0[0] = 99.0
    assert pc.x_hat[0] == 1.0


def test_publish_error_feedback_sends_the_residual_later() -> None:
    pc = PublicCopy(t(1, 2, 3))
    x = t(4, 2, 1)  # x - x_hat = [3, 0, -2]
    seq, q = pc.publish(x, top1)
    assert seq == 1 and torch.equal(q, t(3, 0, 0))
    assert torch.equal(pc.x_hat, t(4, 2, 3))
    assert torch.equal(pc.residual(x), t(0, 0, -2))
    seq, q = pc.publish(x, top1)  # the dropped -2 goes out now
    assert seq == 2 and torch.equal(q, t(0, 0, -2))
    assert torch.equal(pc.x_hat, x)
    seq, q = pc.publish(x, top1)
    assert seq == 3 and torch.equal(q, t(0, 0, 0))


def test_publish_rejects_bad_shapes() -> None:
    pc = PublicCopy(t(0, 0))
    with pytest.raises(ValueError, match="shape"):
        pc.publish(t(1, 2, 3), top1)
    with pytest.raises(ValueError, match="compress"):
        pc.publish(t(1, 2), lambda v: v[:1])
    assert pc.seq == 0


def test_reset() -> None:
    pc = PublicCopy(t(0, 0))
    pc.reset(t(5, 6), 17)
    assert torch.equal(pc.x_hat, t(5, 6)) and pc.seq == 17
    with pytest.raises(ValueError):
        pc.reset(t(5, 6), -1)


def test_neighbour_needs_snapshot_first() -> None:
    nc = NeighbourCopy()
    assert nc.x_hat is None and not nc.has_state
    assert nc.apply_update(1, t(1, 1), step=1, k=0) is False


def test_neighbour_in_order_gap_and_duplicate() -> None:
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(1, 1), step=0, k=3)
    assert nc.refreshed_at_k == 3 and nc.seq == 0
    assert nc.apply_update(2, t(5, 5), step=2, k=4) is False  # gap: seq 1 missing
    assert torch.equal(nc.x_hat, t(1, 1)) and nc.seq == 0 and nc.refreshed_at_k == 3
    assert nc.apply_update(1, t(2, -1), step=1, k=5) is True
    assert torch.equal(nc.x_hat, t(3, 0)) and nc.seq == 1 and nc.step == 1 and nc.refreshed_at_k == 5
    assert nc.apply_update(1, t(2, -1), step=1, k=6) is True  # duplicate: ignored, consistent
    assert torch.equal(nc.x_hat, t(3, 0)) and nc.refreshed_at_k == 5
    assert nc.apply_update(2, t(5, 5), step=2, k=7) is True
    assert torch.equal(nc.x_hat, t(8, 5)) and nc.seq == 2
    nc.set_snapshot(10, t(0, 0), step=20, k=9)  # gap filled by a snapshot
    assert torch.equal(nc.x_hat, t(0, 0)) and nc.seq == 10 and nc.step == 20
    assert nc.apply_update(11, t(1, 0), step=21, k=9) is True


def test_neighbour_snapshot_is_copied() -> None:
    snap = t(1, 2)
    nc = NeighbourCopy()
    nc.set_snapshot(0, snap, 0, 0)
    snap[0] = 7.0
    assert nc.x_hat is not None and nc.x_hat[0] == 1.0


def test_neighbour_staleness() -> None:
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(0), step=0, k=5)
    assert nc.staleness(7) == 2
    assert nc.staleness(5) == 0
    assert nc.staleness(3) == 0  # never negative


def test_neighbour_velocity_ema_per_step() -> None:
    nc = NeighbourCopy(velocity_beta=0.5)
    nc.set_snapshot(0, t(0, 0), step=0, k=0)
    assert torch.equal(nc.velocity, t(0, 0))
    nc.apply_update(1, t(2, 4), step=2, k=1)  # change per step [1, 2]
    assert torch.allclose(nc.velocity, t(0.5, 1.0), atol=0, rtol=0)
    nc.apply_update(2, t(3, 3), step=3, k=2)  # change per step [3, 3]
    assert torch.allclose(nc.velocity, t(1.75, 2.0), atol=0, rtol=0)
    nc.apply_update(3, t(9, 9), step=3, k=3)  # no step advance: velocity unchanged
    assert torch.allclose(nc.velocity, t(1.75, 2.0), atol=0, rtol=0)
    nc.set_snapshot(9, t(14, 14), step=5, k=4)  # from [14, 16]: change [0, -2] over 2 steps
    assert torch.allclose(nc.velocity, t(0.875, 0.5), atol=0, rtol=0)
    with pytest.raises(ValueError):
        NeighbourCopy(velocity_beta=1.0)


def test_neighbour_rejects_bad_shape() -> None:
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(0, 0), 0, 0)
    with pytest.raises(ValueError, match="shape"):
        nc.apply_update(1, t(1, 2, 3), 1, 1)
    assert nc.seq == 0


def test_receiver_tracks_sender_exactly() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, generator=g)
    pc = PublicCopy(torch.zeros(50))
    nc = NeighbourCopy()
    nc.set_snapshot(0, torch.zeros(50), 0, 0)
    compress = topk_frac(0.1)
    for s in range(1, 30):
        x = x + 0.1 * torch.randn(50, generator=g)
        seq, q = pc.publish(x, compress)
        assert nc.apply_update(seq, q, step=s, k=s)
        assert torch.equal(nc.x_hat, pc.x_hat)
    # error feedback: with x held fixed, the public copy catches up exactly
    for _ in range(10):
        pc.publish(x, compress)
    assert torch.equal(pc.x_hat, x)
