"""Piecewise passes read cache-sized pieces on the CPU and long ones elsewhere (`piece_for`): on a GPU
each piece is kernel launches and a wait, and the same arithmetic in fewer pieces gives the same
answer up to the order of a norm's sums."""

from __future__ import annotations

import pytest
import torch

import async_opt.mixing as mixing
from async_opt import PublicCopy
from async_opt.mixing import DEVICE_PIECE, PIECE, piece_for, safe_distances


def test_cpu_tensors_get_cache_pieces_and_others_long_ones():
    assert piece_for(torch.empty(3)) == PIECE
    assert piece_for(torch.empty(3, device="meta")) == DEVICE_PIECE > PIECE


def test_long_pieces_give_the_same_distances_and_copies(monkeypatch):
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(3 * PIECE + 5, generator=g).to(torch.bfloat16)
    copies = [ref.float() + torch.randn(ref.numel(), generator=g) * s for s in (0.1, 1.0)]
    x = ref.float() + torch.randn(ref.numel(), generator=g) * 0.01
    short = safe_distances(copies, ref), PublicCopy(ref.float(), dtype=torch.bfloat16)
    short[1].publish(x.clone(), lambda d: d, in_place=True, before_write=lambda: None)
    monkeypatch.setattr(mixing, "PIECE", DEVICE_PIECE)  # what a device's passes read
    long = safe_distances(copies, ref), PublicCopy(ref.float(), dtype=torch.bfloat16)
    long[1].publish(x.clone(), lambda d: d, in_place=True, before_write=lambda: None)
    assert long[0] == pytest.approx(short[0], rel=1e-5)  # float32 sums, in another order
    assert torch.equal(long[1].x_hat.view(torch.int16), short[1].x_hat.view(torch.int16))
