"""Public copies (CHOCO-SGD error feedback) and neighbour reconstructions: exact values."""

from __future__ import annotations

import pytest
import torch

from async_opt import NeighbourCopy, PublicCopy
from async_opt.public_copy import Increment


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
    assert nc.apply_update(1, t(1, 1), step=1) is False


def test_neighbour_in_order_gap_and_duplicate() -> None:
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(1, 1), step=0)
    assert nc.seq == 0
    assert nc.apply_update(2, t(5, 5), step=2) is False  # gap: seq 1 missing
    assert torch.equal(nc.x_hat, t(1, 1)) and nc.seq == 0
    assert nc.apply_update(1, t(2, -1), step=1) is True
    assert torch.equal(nc.x_hat, t(3, 0)) and nc.seq == 1 and nc.step == 1
    assert nc.apply_update(1, t(2, -1), step=1) is True  # duplicate: ignored, consistent
    assert torch.equal(nc.x_hat, t(3, 0))
    assert nc.apply_update(2, t(5, 5), step=2) is True
    assert torch.equal(nc.x_hat, t(8, 5)) and nc.seq == 2
    nc.set_snapshot(10, t(0, 0), step=20)  # gap filled by a snapshot
    assert torch.equal(nc.x_hat, t(0, 0)) and nc.seq == 10 and nc.step == 20
    assert nc.apply_update(11, t(1, 0), step=21) is True


def test_copies_never_write_into_a_tensor_they_handed_out() -> None:
    """A reader holding x_hat (the training thread mixing from a view) never sees it change."""
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(1, 1), step=0)
    held = nc.x_hat
    nc.apply_update(1, t(2, 2), step=1)
    assert torch.equal(held, t(1, 1)) and torch.equal(nc.x_hat, t(3, 3))
    pc = PublicCopy(t(0, 0))
    held = pc.x_hat
    pc.publish(t(4, 4), lambda d: d)
    assert torch.equal(held, t(0, 0)) and torch.equal(pc.x_hat, t(4, 4))


def test_copies_written_in_place_hold_the_same_bits_as_new_ones() -> None:
    """Where the caller says no one reads x̂ (`before_write`, `in_place`), the update is added into
    the held tensor, bit for bit as into a new one: bfloat16 copies round each float32 sum once."""
    g = torch.Generator().manual_seed(3)
    x0, x1 = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    fresh, inplace = PublicCopy(x0, dtype=torch.bfloat16), PublicCopy(x0, dtype=torch.bfloat16)
    held, calls = inplace.x_hat, []

    def halve(d: torch.Tensor) -> torch.Tensor:
        calls.append("compress")
        return d * 0.5

    fresh.publish(x1, halve)
    inplace.publish(x1, halve, before_write=lambda: calls.append("before_write"))
    assert calls == ["compress", "compress", "before_write"]  # told after compressing, before writing
    assert inplace.x_hat is held and torch.equal(held, fresh.x_hat) and inplace.seq == fresh.seq == 1
    copies = [NeighbourCopy(), NeighbourCopy()]
    for c in copies:
        c.set_snapshot(0, x0.to(torch.bfloat16), step=0)
    held = copies[1].x_hat
    for seq in (1, 2):
        q = torch.randn(1000, generator=g)
        copies[0].apply_update(seq, q, step=seq)
        copies[1].apply_update(seq, q, step=seq, in_place=True)
    assert copies[1].x_hat is held and torch.equal(held, copies[0].x_hat)
    assert copies[1].magnitude == copies[0].magnitude


def test_an_update_that_might_overflow_is_never_written_in_place() -> None:
    """A sum the magnitude bound cannot prove finite makes a new tensor even when writing in place
    is allowed: the caller that finds it overflowed drops it, and the held copy is untouched."""
    nc = NeighbourCopy()
    big = torch.tensor([3e38, 1.0], dtype=torch.float32)
    nc.set_snapshot(0, big, step=0)
    held = nc.x_hat
    assert nc.apply_update(1, torch.tensor([3e38, 0.0], dtype=torch.float32), step=1, in_place=True)
    assert nc.x_hat is not held and torch.equal(held, big) and not bool(torch.isfinite(nc.x_hat).all())


def test_a_spent_x_is_restored_before_the_public_copy_moves() -> None:
    """`in_place` with `restore`: x holds the parameters again (from the x̂ it started from), and
    x̂ still moves by what was sent, written in place."""
    pc, x = PublicCopy(t(1.0, 2.0)), t(2.0, 6.0)
    held = pc.x_hat
    pc.publish(x, lambda d: d * 0.5, in_place=True, restore=True, before_write=lambda: None)
    assert torch.equal(x, t(2.0, 6.0)) and pc.x_hat is held and torch.equal(held, t(1.5, 4.0))


def test_neighbour_snapshot_is_copied() -> None:
    snap = t(1, 2)
    nc = NeighbourCopy()
    nc.set_snapshot(0, snap, 0)
    snap[0] = 7.0
    assert nc.x_hat is not None and nc.x_hat[0] == 1.0


def test_neighbour_rejects_bad_shape() -> None:
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(0, 0), 0)
    with pytest.raises(ValueError, match="shape"):
        nc.apply_update(1, t(1, 2, 3), 1)
    assert nc.seq == 0


def test_receiver_tracks_sender_exactly() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, generator=g)
    pc = PublicCopy(torch.zeros(50))
    nc = NeighbourCopy()
    nc.set_snapshot(0, torch.zeros(50), 0)
    compress = topk_frac(0.1)
    for s in range(1, 30):
        x = x + 0.1 * torch.randn(50, generator=g)
        seq, q = pc.publish(x, compress)
        assert nc.apply_update(seq, q, step=s)
        assert torch.equal(nc.x_hat, pc.x_hat)
    # error feedback: with x held fixed, the public copy catches up exactly
    for _ in range(10):
        pc.publish(x, compress)
    assert torch.equal(pc.x_hat, x)


def test_a_neighbours_steps_sum_follows_its_copy_through_snapshots_and_updates() -> None:
    """steps_hat: set by a snapshot that carries it, summed by updates that do, left by those that
    do not, void where a sum overflows; a tensor handed out never changes."""
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(0, 0), 0, steps=t(1, 2))
    held = nc.steps_hat
    nc.apply_update(1, t(1, 1), 1, steps=t(0.5, 0.5))
    nc.apply_update(2, t(1, 1), 2)  # its sender shared no steps this time
    assert torch.equal(nc.steps_hat, t(1.5, 2.5)) and torch.equal(held, t(1, 2))
    nc.apply_update(3, t(1, 1), 3, steps=t(float("inf"), 0))
    assert nc.steps_hat is None and torch.equal(nc.x_hat, t(3, 3))  # the copy itself stands
    nc.apply_update(4, t(1, 1), 4, steps=t(1, 1))  # nothing to add to until a snapshot says
    assert nc.steps_hat is None
    nc.set_snapshot(4, t(4, 4), 4)
    assert nc.steps_hat is None  # a snapshot without steps: its sender shares none
    with pytest.raises(ValueError, match="shape"):
        nc.set_snapshot(5, t(0, 0), 5, steps=t(1, 2, 3))


class Kept:
    """An `Increment` holding a few entries of a longer vector, as a decoded top-k update does."""

    def __init__(self, numel: int, at: list[int], values: list[float]) -> None:
        self.numel, self.at, self.values = numel, torch.tensor(at), torch.tensor(values)

    def added_to(self, x: torch.Tensor) -> torch.Tensor:
        return self.add_into(x.clone())

    def add_into(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_add_(0, self.at, self.values.to(x.dtype))

    def norm(self) -> float:
        return float(torch.linalg.vector_norm(self.values))

    def max_abs(self) -> float:
        return float(self.values.abs().max())


def test_an_increment_moves_copies_as_its_expanded_tensor_does() -> None:
    assert isinstance(Kept(3, [0], [1.0]), Increment)
    pc, held = PublicCopy(t(1.0, 2.0, 3.0)), t(1.0, 2.0, 3.0)
    old = pc.x_hat
    seq, q = pc.publish(t(1.0, 6.0, 3.0), lambda d: Kept(3, [1], [float(d[1])]))
    assert seq == 1 and isinstance(q, Kept)
    assert pc.x_hat.tolist() == [1.0, 6.0, 3.0] and torch.equal(old, held)  # a new tensor: the old one unchanged
    assert list(pc.moves) == [4.0]
    nc = NeighbourCopy()
    nc.set_snapshot(0, t(0.0, 0.0, 0.0), step=0, steps=t(0.0, 0.0, 0.0))
    assert nc.apply_update(1, Kept(3, [2], [5.0]), step=3, steps=Kept(3, [0], [2.0]))
    assert nc.x_hat.tolist() == [0.0, 0.0, 5.0] and nc.steps_hat.tolist() == [2.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="4 entries do not match 3"):
        nc.apply_update(2, Kept(4, [0], [1.0]), step=4)


def test_a_copy_is_certainly_finite_only_while_its_bound_proves_it() -> None:
    f32 = torch.finfo(torch.float32).max
    nc = NeighbourCopy()
    assert not nc.certainly_finite  # nothing held yet
    nc.set_snapshot(0, torch.tensor([0.25 * f32, -1.0, 0.0]), step=0)
    assert nc.certainly_finite and nc.magnitude == pytest.approx(0.25 * f32)
    assert nc.apply_update(1, Kept(3, [0], [0.2 * f32]), step=1)  # 0.45 of max: still proven
    assert nc.certainly_finite and torch.isfinite(nc.x_hat).all()
    assert nc.apply_update(2, Kept(3, [1], [-0.1 * f32]), step=2)  # another entry, but the bound sums
    assert not nc.certainly_finite and torch.isfinite(nc.x_hat).all()  # finite, yet no longer proven
    assert nc.apply_update(3, Kept(3, [0], [0.6 * f32]), step=3)
    assert not torch.isfinite(nc.x_hat).all()  # overflowed where the bound had given up
    nc.set_snapshot(4, torch.tensor([1.0, float("nan"), 0.0]), step=4)
    assert nc.magnitude == float("inf") and not nc.certainly_finite
    nc.set_snapshot(5, torch.tensor([1.0, -2.0, 0.0]), step=5)
    assert nc.magnitude == 2.0 and nc.certainly_finite  # a snapshot starts the bound again


@pytest.mark.parametrize("seed", range(5))
def test_the_magnitude_bound_is_never_below_the_copy_it_bounds(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    nc = NeighbourCopy()
    nc.set_snapshot(0, torch.randn(64, generator=g, dtype=torch.float32) * 1e36, step=0)
    proven = 0
    for seq in range(1, 200):
        at = torch.randint(0, 64, (8,), generator=g).unique()
        values = torch.randn(at.numel(), generator=g) * 10.0 ** float(torch.randint(30, 38, (1,), generator=g))
        nc.apply_update(seq, Kept(64, at.tolist(), values.tolist()), step=seq)
        if nc.certainly_finite:
            proven += 1
            assert torch.isfinite(nc.x_hat).all()
            assert float(nc.x_hat.abs().max()) <= nc.magnitude
    assert 0 < proven < 199  # the bound held for a while, then gave up as the copy grew

