"""The node worker measures each copy's distance when it builds a view (peer/core/view.py), so
the training thread's mix reads it instead of making a pass over the model for it."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from async_opt import safe_distances, safe_norm
from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.view import CopyView, ViewBuilder


def _copies(xs: dict[bytes, torch.Tensor], pulled: int = 1) -> list[CopyView]:
    return [CopyView(key, pulled, x, 0.0, pulled=pulled) for key, x in xs.items()]


def test_distances_are_measured_once_per_pair_of_tensors_and_again_when_either_changes():
    g = torch.Generator().manual_seed(0)
    public = torch.randn(1000, generator=g)
    xs = {b"a" * 32: torch.randn(1000, generator=g), b"b" * 32: torch.randn(1000, generator=g)}
    builder = ViewBuilder()
    view = builder.build(public, _copies(xs), None, ())
    assert [c.distance for c in view.copies] == safe_distances(list(xs.values()), public)
    assert view.public_norm == safe_norm(public)
    xs[b"b" * 32] = xs[b"b" * 32] + 1  # one copy replaced: its distance is new, the other's kept
    again = builder.build(public, _copies(xs), None, ())
    assert again.copies[0].distance == view.copies[0].distance
    assert again.copies[1].distance == pytest.approx(float((xs[b"b" * 32] - public).norm()))
    moved = public + 0.5  # a publish: unchanged copies are left to their reader, a changed one measured
    xs[b"a" * 32] = xs[b"a" * 32] * 2
    after = builder.build(moved, _copies(xs), 1.0, (0.1,))
    assert after.copies[0].distance == safe_distances([xs[b"a" * 32]], moved)[0]
    assert after.copies[1].distance is None
    assert builder.build(moved, _copies(xs), 1.0, (0.1,)).copies[1].distance is None  # not measured later either


def test_the_builder_keeps_no_old_copy_alive():
    builder, public = ViewBuilder(), torch.zeros(100)
    old = torch.ones(100)
    gone = weakref.ref(old)
    builder.build(public, _copies({b"a" * 32: old}), None, ())
    builder.build(public, _copies({b"a" * 32: torch.full((100,), 2.0)}), None, ())
    del old
    gc.collect()
    assert gone() is None


def test_the_mixer_takes_the_distance_the_view_carries():
    """A distance of 100 on a copy one unit away, the radius 1 (our own moves): the mixer clips by
    the carried figure, so the pull is (1/100)² of a half step; had it measured the difference
    itself (1, within the radius) it would pull the whole half step."""
    cfg = GossipConfig(swarm="t", staleness="constant,gamma=0.5", clip_max_relative=1e9, clip_own_multiplier=1.0)
    public = torch.zeros(4)
    copy = CopyView(b"a" * 32, 1, torch.tensor([1.0, 0.0, 0.0, 0.0]), 0.0, pulled=1, distance=100.0)
    from peer.core.view import MixView

    delta, report = Mixer(cfg).mix(None, MixView(public, (copy,), 1.0, None, (1.0,) * 4), k=1, now=0.0)
    assert report.distances[copy.key] == 100.0 and report.mixed == 1
    assert report.radius == 1.0 and report.clipped == 1
    assert float(delta[0]) == pytest.approx(0.5 * 1e-4)
