"""SparseLoCo's message and error feedback: exact codes, exact byte counts, and what a round
leaves out is sent in later ones."""

from __future__ import annotations

import math

import pytest
import torch

from async_opt import DiLoCoOuter, ErrorFeedback, kept, message_bytes, top_k_two_bit


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def test_top_k_keeps_the_largest_entries_with_their_signs_at_two_magnitudes() -> None:
    msg = top_k_two_bit(t(0.1, -4.0, 0.2, 2.0, -1.0, 3.0), 4)
    assert msg.indices.tolist() == [1, 3, 4, 5]
    # magnitudes 4, 2, 1, 3: median split at 2.5 -> low = mean(2, 1), high = mean(4, 3)
    assert (msg.low, msg.high) == (1.5, 3.5)
    assert torch.equal(msg.dense(torch.float64), t(0, -3.5, 0, 1.5, -1.5, 3.5))


def test_one_kept_entry_is_sent_exactly() -> None:
    msg = top_k_two_bit(t(0.5, -7.0, 1.0), 1)
    assert torch.equal(msg.dense(torch.float64), t(0, -7.0, 0))


def test_the_quantised_message_never_overshoots_what_it_keeps() -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        v = torch.randn(200, generator=g, dtype=torch.float64)
        msg = top_k_two_bit(v, 8)
        kept_part = torch.zeros_like(v)
        kept_part[msg.indices] = v[msg.indices]
        assert (kept_part - msg.dense(torch.float64)).norm() < kept_part.norm()


@pytest.mark.parametrize("numel,k", [(676, 14), (4096, 64), (2, 1), (1000, 1000)])
def test_byte_count_is_index_bits_plus_two_bits_per_entry_plus_two_levels(numel: int, k: int) -> None:
    want = math.ceil(k * (math.ceil(math.log2(numel)) + 2) / 8) + 8
    assert message_bytes(numel, k) == want
    assert top_k_two_bit(torch.arange(1.0, numel + 1), k).nbytes() == want


def test_kept_is_the_fraction_and_at_least_one() -> None:
    assert kept(676, 0.02) == 14 and kept(10, 0.01) == 1 and kept(100, 1.0) == 100
    with pytest.raises(ValueError):
        ErrorFeedback(0.0, 1.0)
    with pytest.raises(ValueError):
        ErrorFeedback(0.1, 1.5)


def pseudo_gradients(rounds: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    base = torch.randn(100, generator=g, dtype=torch.float64)
    return [base + 0.3 * torch.randn(100, generator=g, dtype=torch.float64) for _ in range(rounds)]


def test_error_feedback_sends_later_what_a_round_left_out() -> None:
    fb = ErrorFeedback(fraction=0.03, decay=1.0)
    deltas = pseudo_gradients(400)
    sent = torch.zeros(100, dtype=torch.float64)
    gaps = []
    for r, d in enumerate(deltas, 1):
        sent += fb.compress(d).dense(torch.float64)
        total = torch.stack(deltas[:r]).sum(0)
        assert fb.acc is not None and torch.allclose(sent + fb.acc, total)  # nothing lost, nothing made up
        gaps.append(float((sent - total).norm() / total.norm()))
    assert gaps[-1] < 0.1 * gaps[0] and gaps[-1] < 0.05


def test_without_feedback_what_is_left_out_is_lost() -> None:
    fb = ErrorFeedback(fraction=0.03, decay=0.0)  # no memory: each round sends its own top 3 alone
    deltas = pseudo_gradients(400)
    sent = sum(fb.compress(d).dense(torch.float64) for d in deltas)
    total = torch.stack(deltas).sum(0)
    assert float((sent - total).norm() / total.norm()) > 0.5


def test_outer_apply_is_the_step_on_a_reduced_pseudo_gradient() -> None:
    a, b = DiLoCoOuter(0.7, 0.9, True), DiLoCoOuter(0.7, 0.9, True)
    x = t(1.0, 2.0)
    for workers in ([t(0.5, 1.0), t(0.7, 2.2)], [t(0.1, 0.3), t(0.2, 0.5)]):
        got = a.apply(x, x - (workers[0] + workers[1]) / 2)
        want = b.step(x, workers)
        assert torch.allclose(got, want)
        x = got
    with pytest.raises(ValueError):
        a.apply(x, t(1.0))
