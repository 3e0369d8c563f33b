"""all_finite: the same verdict as torch.isfinite(x).all() on every dtype, layout and
position of a bad value, and the frame builders still refuse one bad entry in a million."""

from __future__ import annotations

import pytest
import torch

from protocol import Identity, make_snapshot_frame, make_update_frame
from protocol.finite import all_finite

N = 1_132_560
BAD = [float("nan"), float("inf"), float("-inf")]


def layouts(x: torch.Tensor) -> list[torch.Tensor]:
    """The tensor, a strided slice, a transposed 2-D view, and other dtypes."""
    return [x, x[1::3], x.view(80, -1).t(), x.double(), x.half(), x.to(torch.bfloat16)]


@pytest.mark.parametrize("position", [0, 1, N // 2, N - 2, N - 1])
@pytest.mark.parametrize("bad", BAD)
def test_agrees_with_torch_isfinite(position: int, bad: float) -> None:
    x = torch.randn(N, generator=torch.Generator().manual_seed(position))
    for t in layouts(x):
        assert all_finite(t) is True
    x[position] = bad
    for t in layouts(x):
        assert all_finite(t) is bool(torch.isfinite(t).all())
    assert all_finite(x) is False


def test_edge_tensors() -> None:
    assert all_finite(torch.zeros(0)) is True
    assert all_finite(torch.arange(5)) is True
    assert all_finite(torch.tensor(float("nan"))) is False
    assert all_finite(torch.full((3,), 3.4e38) * 2) is False  # overflow to inf
    grad = torch.randn(8, requires_grad=True) * 2
    assert all_finite(grad) is True


@pytest.mark.parametrize("bad", BAD)
def test_builders_refuse_one_bad_entry_at_the_end_of_a_large_vector(bad: float) -> None:
    identity = Identity.generate(b"\x05" * 32)
    x = torch.randn(N)
    make_update_frame(identity, swarm="s", fingerprint="f" * 64, seq=1, step=0, timestamp=1.7e9,
                      codec="topk:0.1+int8", delta=x)  # control: the same call with x finite builds
    x[-1] = bad
    with pytest.raises(ValueError, match="non-finite"):
        make_update_frame(identity, swarm="s", fingerprint="f" * 64, seq=1, step=0, timestamp=1.7e9,
                          codec="topk:0.1+int8", delta=x)
    with pytest.raises(ValueError, match="non-finite"):
        make_snapshot_frame(identity, swarm="s", fingerprint="f" * 64, seq=1, step=0, timestamp=1.7e9, vector=x)
