"""A publish handed a copy of the parameters that is its own (`scratch`, as the node worker's is)
takes the residual x − x̂ in it instead of in a new model-sized vector: the same frames and the
same public copy, bit for bit, and the averaged weights still sample the parameters."""

from __future__ import annotations

import pytest
import torch

from async_opt import PublicCopy
from tests.unit.peer.core.test_copy_precision import NOW, node, walk


@pytest.mark.parametrize("compression", ["topk:0.1+int8", "int8"])
def test_scratch_changes_no_frame_and_no_copy(compression: str) -> None:
    xs = walk(40, seed=3)
    plain, spent = node(0, xs[0], compression=compression), node(0, xs[0], compression=compression)
    unsampled = 0
    for step, x in enumerate(xs, start=1000):  # past the first few hundred steps: a sample every few
        given, sampled = x.clone(), plain.average.due(step)
        plain.publish(x, step, NOW + step)
        spent.publish(given, step, NOW + step, scratch=True)
        assert plain.outbox.since(step - 1) == spent.outbox.since(step - 1), step
        assert torch.equal(plain.public.x_hat.view(torch.int16), spent.public.x_hat.view(torch.int16)), step
        if not sampled:  # what it was given now holds the residual the update was made from
            assert not torch.allclose(given, x, rtol=0.5, atol=0)
            unsampled += 1
    assert unsampled > 0  # the walk is long enough that the averaged weights skip some publishes
    a, b = plain.average.weights(), spent.average.weights()
    assert a is not None and b is not None and a[1] == b[1]
    assert torch.allclose(a[0], b[0], rtol=0, atol=1e-6)  # restored up to a unit in the last place


def test_without_scratch_and_where_the_node_keeps_the_parameters_nothing_given_is_written() -> None:
    xs = walk(5, seed=4)
    for cfg, scratch in (({}, False), ({"copy_dtype": "float32"}, True)):
        n = node(0, xs[0], **cfg)
        for step, x in enumerate(xs, start=1):
            given = x.clone()
            n.publish(given, step, NOW + step, scratch=scratch)
            assert torch.equal(given, x), (cfg, scratch, step)


def test_restore_gives_back_the_parameters_from_the_residual_and_the_old_copy() -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(300_007, generator=g)
    public = PublicCopy(torch.zeros_like(x), dtype=torch.bfloat16)
    public.publish(x.clone(), lambda d: d * 0.5)
    before, spent = public.x_hat, x.clone()
    public.publish(spent, lambda d: d * 0.5, in_place=True)
    assert torch.equal(spent, x - before.to(torch.float32))  # the residual, against the x̂ before
    restored = PublicCopy.restore(spent, before)
    assert restored is spent and torch.allclose(restored, x, rtol=2 ** -23, atol=0)
