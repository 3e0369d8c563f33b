"""The averaged weights a peer hands its user: the power-function EMA (exact values against its
per-step definition), the swarm estimate's bound on any one copy, and the node keeping it at each
publish (async_opt.averaging, peer.core.average). Checkpoints carrying it:
test_averaged_weights_checkpoint.py."""

from __future__ import annotations

import math

import pytest
import torch

from async_opt.averaging import (MAX_SAMPLE_GAP, SIGMA_REL_MAX, PowerEma, power_ema_exponent, progress_ratio, sigma_rel_of,
                                 swarm_estimate)
from async_opt.mixing import PIECE, pull_scale, safe_distances, safe_norm
from peer.core.average import SwarmAverage
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.view import CopyView, MixView
from protocol import Identity, flat_model_spec
from tests.paths import REPO


# ---------------------------------------------------------------- the power-function EMA
@pytest.mark.parametrize("sigma_rel, gamma", [(0.05, 16.97), (0.10, 6.94)])
def test_exponent_matches_the_published_pairs(sigma_rel: float, gamma: float) -> None:
    # EDM2 (Karras et al. 2024) quotes γ = 16.97 for σ_rel 0.05 and γ = 6.94 for σ_rel 0.10
    assert power_ema_exponent(sigma_rel) == pytest.approx(gamma, abs=0.01)
    assert sigma_rel_of(power_ema_exponent(sigma_rel)) == pytest.approx(sigma_rel, rel=1e-9)


@pytest.mark.parametrize("bad", [0.0, -0.1, SIGMA_REL_MAX + 1e-6, math.nan, math.inf])
def test_a_width_outside_the_profile_family_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="sigma_rel"):
        power_ema_exponent(bad)
    if bad != 0.0:  # 0 is the config's "no average"
        with pytest.raises(ValueError, match="average_sigma_rel"):
            GossipConfig(average_sigma_rel=bad)


def test_zero_width_means_no_average() -> None:
    assert SwarmAverage(GossipConfig(average_sigma_rel=0)).ema is None


def test_sampled_every_step_it_is_the_recursive_definition() -> None:
    ema, gamma = PowerEma(0.1), power_ema_exponent(0.1)
    expected = None
    for t in range(1, 30):
        sample = torch.tensor([float(t) ** 1.5, -float(t)])
        beta = (1 - 1 / t) ** (gamma + 1)
        expected = sample.clone() if expected is None else beta * expected + (1 - beta) * sample
        ema.update(sample, t)
    assert torch.allclose(ema.value, expected, rtol=1e-5)


def test_sampled_every_fourth_step_it_equals_per_step_updates_with_that_sample() -> None:
    """Between samples the betas multiply to (t_prev/t)^(γ+1): a sample taken every 4 steps counts
    as the value of each of the 4 steps it stands for."""
    sparse, dense = PowerEma(0.1), PowerEma(0.1)
    for t in range(4, 41, 4):
        sample = torch.tensor([t, t * 0.5, -(t**1.3)], dtype=torch.float32)
        sparse.update(sample, t)
        for step in range(t - 3, t + 1):
            dense.update(sample, step)
    assert torch.allclose(sparse.value, dense.value, rtol=1e-5)


def test_the_first_sample_is_taken_whole_and_a_repeated_step_is_ignored() -> None:
    ema = PowerEma(0.1)
    ema.update(torch.tensor([2.0]), 8)
    assert ema.value.item() == 2.0
    ema.update(torch.tensor([100.0]), 8)  # the same step again: nothing new happened
    assert ema.value.item() == 2.0 and ema.step == 8


def test_an_update_replaces_the_tensor_a_reader_holds_instead_of_writing_into_it() -> None:
    ema = PowerEma(0.1)
    first = ema.update(torch.ones(4), 4)
    second = ema.update(torch.full((4,), 3.0), 8)
    assert first is not second and torch.equal(first, torch.ones(4))


def test_a_handed_over_sample_holds_the_new_average_and_the_old_one_is_left_alone() -> None:
    ema, kept = PowerEma(0.1), PowerEma(0.1)
    first = ema.update(torch.ones(4), 4, handed_over=True)
    kept.update(torch.ones(4), 4)
    sample = torch.full((4,), 3.0)
    second = ema.update(sample, 8, handed_over=True)
    assert second.data_ptr() == sample.data_ptr() and torch.equal(first, torch.ones(4))
    assert torch.equal(second, kept.update(torch.full((4,), 3.0), 8))


@pytest.mark.parametrize(("sigma_rel", "step", "gap"), [(0.1, 1, 1), (0.1, 159, 1), (0.1, 160, 2), (0.1, 319, 3),
                                                     (0.1, 320, 4), (0.1, 10**6, 4), (0.05, 639, 3), (0.05, 640, 4)])
def test_the_gap_between_samples_is_an_eighth_of_the_window_within_one_and_the_cap(
        sigma_rel: float, step: int, gap: int) -> None:
    assert MAX_SAMPLE_GAP == 4 and PowerEma(sigma_rel).sample_gap(step) == gap


def test_a_sample_is_due_first_and_then_once_the_gap_has_passed() -> None:
    ema = PowerEma(0.1)
    assert ema.due(400)
    ema.update(torch.zeros(2), 400)
    assert [ema.due(t) for t in (400, 401, 403, 404, 500)] == [False, False, False, True, True]


def test_sampled_every_few_steps_the_average_keeps_almost_all_the_noise_removal() -> None:
    """Parameters that are pure noise correlated over ~10 steps (an AR(1) of 0.9, as Adam's
    momentum makes a replica's steps): the average sampled when due ends within 0.15 of the
    every-step average's own residual noise of it (the live noise is 6 times that residual); the
    control, a sample every 16 steps, is three times as far."""
    g = torch.Generator().manual_seed(0)
    dense, ruled, sparse = PowerEma(0.1), PowerEma(0.1), PowerEma(0.1)
    noise = torch.zeros(2048)
    for t in range(1, 3001):
        noise = 0.9 * noise + torch.randn(2048, generator=g)
        dense.update(noise, t)
        if ruled.due(t):
            ruled.update(noise, t)
        if sparse.value is None or t - sparse.step >= 16:
            sparse.update(noise, t)
    def off(ema: PowerEma) -> float:
        return ((ema.value - dense.value).norm() / dense.value.norm()).item()

    assert noise.norm() > 5 * dense.value.norm()  # the average removes most of the noise
    assert off(ruled) < 0.15 and off(sparse) > 3 * off(ruled)


# ---------------------------------------------------------------- the swarm estimate
def _diffs(public: torch.Tensor, copies: list[torch.Tensor]) -> list[tuple[torch.Tensor, float]]:
    return [(c, safe_norm(c - public)) for c in copies]


def test_with_no_copy_the_estimate_is_our_parameters() -> None:
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(swarm_estimate(x, torch.zeros(2), [], rho=1.0), x)


def test_unclipped_it_is_the_mean_of_x_and_the_copies_carried_forward_by_our_residual() -> None:
    x, public = torch.tensor([1.0, 1.0]), torch.tensor([0.5, 0.5])
    copies = [torch.tensor([0.0, 2.0]), torch.tensor([3.0, -1.0])]
    got = swarm_estimate(x, public, _diffs(public, copies), rho=None)
    assert torch.allclose(got, (x + sum(c + (x - public) for c in copies)) / 3)
    assert torch.allclose(got, torch.tensor([5.0 / 3, 1.0]))


def test_copies_lagging_as_far_as_our_own_do_not_drag_the_estimate_back() -> None:
    """Every public copy still near the start while the parameters moved on (top-k, early in
    training): the estimate stays with the parameters instead of averaging in the start."""
    start, x = torch.zeros(4), torch.full((4,), 5.0)
    got = swarm_estimate(x, start, _diffs(start, [start + 0.1, start - 0.1, start.clone()]), rho=None)
    assert torch.allclose(got, x)


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_no_copy_moves_the_estimate_more_than_the_radius_over_one_plus_m(power: float) -> None:
    x = public = torch.zeros(1000)
    honest = [torch.full((1000,), 0.01), torch.full((1000,), -0.01)]
    liar = torch.full((1000,), 1e6)
    rho = 0.5
    clean = swarm_estimate(x, public, _diffs(public, honest + [public.clone()]), rho, power)
    attacked = swarm_estimate(x, public, _diffs(public, honest + [liar]), rho, power)
    moved = float((attacked - clean).norm())
    assert moved <= rho / 4 + 1e-6
    if power == 2.0:  # a copy far past the radius barely counts
        assert moved < 1e-6 * rho


def test_a_copy_with_no_finite_distance_adds_nothing() -> None:
    x, public = torch.ones(3), torch.zeros(3)
    got = swarm_estimate(x, public, [(torch.full((3,), math.inf), math.inf)], rho=1.0)
    assert torch.equal(got, x)


def test_a_copy_of_the_wrong_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="copy 0"):
        swarm_estimate(torch.zeros(3), torch.zeros(3), [(torch.zeros(4), 1.0)], rho=1.0)


@pytest.mark.parametrize("own, theirs, ratio", [
    (10, [], 1.0), (10, [10, 20, 30], 2.0), (10, [30, 20, 10], 2.0),
    (10, [10**9], 1.0),  # a lone neighbour does not set its own weight
    (10, [10, 10**9], 1.0),  # the lower median: one of two cannot raise it
    (10, [10, 10, 10**9, 10**9], 1.0), (10, [-5, 20, 20], 2.0), (0, [3, 3, 3], 3.0),
    (10, [0, 0, 40], 1.0), (100, [96, 96, 96], 1.0)])  # neighbours behind (or trailing a period): 1
def test_progress_ratio_is_the_lower_median_step_over_ours_at_least_one(own: int, theirs: list[int], ratio: float) -> None:
    assert progress_ratio(own, theirs) == ratio


@pytest.mark.parametrize("r, expected", [(1.0, 3.0 / 4), (2.0, 6.0 / 7), (5.0, 15.0 / 16), (0.0, 0.0)])
def test_a_straggler_weighs_itself_by_how_far_behind_it_is(r: float, expected: float) -> None:
    """x counts 1/(1 + m·r), each copy r/(1 + m·r): at r = 1 every model alike, r = 0 ours alone."""
    x = public = torch.zeros(2)
    got = swarm_estimate(x, public, _diffs(public, [torch.ones(2)] * 3), rho=None, progress=r)
    assert torch.allclose(got, torch.full((2,), expected))


@pytest.mark.parametrize("r, expected", [(1.0, 1.0), (2.0, 1.0 - 0.5 * 6.0 / 7), (5.0, 1.0 - 0.8 * 15.0 / 16),
                                         (0.5, 1.0)])
def test_a_straggler_carries_only_one_over_r_of_its_residual_to_the_copies(r: float, expected: float) -> None:
    """Residual x − x̂_i = 1, copies where our public copy is: at r ≤ 1 every copy is carried
    forward by all of it; r× behind, by 1/r of it (x̃ = x − (1 − 1/r)·S·(x − x̂_i), S = m·r/(1 + m·r))."""
    x, public = torch.ones(2), torch.zeros(2)
    got = swarm_estimate(x, public, _diffs(public, [torch.zeros(2)] * 3), rho=None, progress=r)
    assert torch.allclose(got, torch.full((2,), expected))


def test_however_far_ahead_copies_claim_to_be_none_moves_the_estimate_past_rho_over_m() -> None:
    x = public = torch.zeros(1000)
    copies = [torch.full((1000,), 1.0), torch.full((1000,), 1.0)]
    rho = safe_norm(copies[0])  # both within the radius: each pulls its whole length
    got = swarm_estimate(x, public, _diffs(public, copies), rho, progress=1e12)
    assert float(got.norm()) <= rho + 1e-3  # each copy's share is below 1/m = 1/2
    assert float(got.norm()) == pytest.approx(rho, rel=1e-6)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_a_progress_ratio_that_is_not_finite_and_non_negative_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="progress ratio"):
        swarm_estimate(torch.zeros(2), torch.zeros(2), [], rho=None, progress=bad)


def test_a_straggler_node_averages_mostly_what_its_neighbours_reached() -> None:
    """Neighbours at step 20 while we are at 4 (r = 5): x counts 1/16, each of the 3 copies 5/16."""
    cfg = GossipConfig(compression="identity", clip=False)
    x = torch.zeros(8)
    copies = tuple(CopyView(bytes([k]) * 32, 1, torch.ones(8), 0.0, 5, 20) for k in (1, 2, 3))
    avg, control = SwarmAverage(cfg), SwarmAverage(cfg)
    control.weigh_progress = False  # the benchmarks' control: every model counts alike
    avg.update(x, MixView(x, copies, 0.0), 4)
    control.update(x, MixView(x, copies, 0.0), 4)
    assert torch.allclose(avg.weights()[0], torch.full((8,), 15.0 / 16))
    assert torch.allclose(control.weights()[0], torch.full((8,), 3.0 / 4))


def test_the_straggler_probe_runs_the_peer_cadence_and_scores_both_rules() -> None:
    """benchmarks/averaging_probe.py --straggler on a tiny workload: the rounds run through the
    real cadence, node and mixer, and the fast replicas score alike under both rules (r = 1)."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import averaging_probe
    from vs_workloads import MLPWorkload

    w = MLPWorkload(hidden=8, batch_size=16, eval_samples=32)
    weighted, control = (averaging_probe.run_straggler_arm(w, 32, weigh) for weigh in (True, False))
    assert all(math.isfinite(v) and v > 0 for v in weighted + control)
    assert weighted[0] == pytest.approx(control[0], rel=1e-6)


# ---------------------------------------------------------------- the node keeps it
def _node(cfg: GossipConfig | None = None, n: int = 6) -> GossipNode:
    return GossipNode(cfg or GossipConfig(compression="identity"), Identity.generate(b"\x05" * 32), flat_model_spec(n),
                      torch.zeros(n), now=100.0)


def test_the_node_samples_its_average_at_a_publish_when_it_is_due() -> None:
    """Publishing every step: early on every publish is a sample; once the window is wide, one
    publish in MAX_SAMPLE_GAP, and the average is never that many steps old."""
    node, sampled = _node(), []
    for step in range(1, 401):
        node.publish(torch.full((6,), float(step)), step, 100.0 + step)
        if node.average.weights()[1] == step:
            sampled.append(step)
        assert step - node.average.weights()[1] < MAX_SAMPLE_GAP
    assert sampled[:159] == list(range(1, 160))
    assert {b - a for a, b in zip(sampled, sampled[1:]) if a >= 320} == {MAX_SAMPLE_GAP}


def test_the_node_samples_its_average_at_every_publish_early_on() -> None:
    node = _node()
    assert node.average.weights() is None
    node.publish(torch.ones(6), 4, 101.0)
    flat, step = node.average.weights()
    assert step == 4 and torch.equal(flat, torch.ones(6))
    node.publish(torch.full((6,), 2.0), 8, 102.0)
    beta = (4 / 8) ** (power_ema_exponent(0.1) + 1)
    assert node.average.weights()[1] == 8
    # held in a 16-bit significand (GossipConfig.average_dtype): within 2^-16 of the float32 figure
    assert torch.allclose(node.average.weights()[0], torch.full((6,), beta * 1 + (1 - beta) * 2), rtol=2**-15)


def test_adopting_a_state_restarts_the_average_from_it() -> None:
    node = _node()
    node.publish(torch.ones(6), 4, 101.0)
    node.adopt(torch.full((6,), 7.0), 500)
    assert torch.equal(node.average.weights()[0], torch.full((6,), 7.0))
    assert node.step == node.average.weights()[1] == 500  # counts on from the adopted state's step


def test_a_joiner_counts_the_steps_of_the_state_it_adopted() -> None:
    """A joiner counts on from the adopted state's step (the swarm's): neighbours at that step are
    not 'far ahead' (every model counts alike); a joiner counting from 0 again (the control)
    would weigh itself as a straggler 250× behind."""
    cfg = GossipConfig(compression="identity", clip=False, average_dtype="float32")  # the rule's exact arithmetic
    x = torch.zeros(8)
    copies = tuple(CopyView(bytes([k]) * 32, 1, torch.ones(8), 0.0, 5, 5010) for k in (1, 2, 3))
    joined, control = SwarmAverage(cfg), SwarmAverage(cfg)
    joined.reset(x, 5000)
    control.reset(x, 10)
    joined.update(x, MixView(x, copies, 0.0), 5010)
    control.update(x, MixView(x, copies, 0.0), 20)
    kept = (5000 / 5010) ** (power_ema_exponent(0.1) + 1)  # the reset sample's weight ten steps on
    assert torch.allclose(joined.weights()[0], torch.full((8,), (1 - kept) * 3 / 4))
    kept = (10 / 20) ** (power_ema_exponent(0.1) + 1)
    r = 5010 / 20
    assert torch.allclose(control.weights()[0], torch.full((8,), (1 - kept) * 3 * r / (1 + 3 * r)))


def test_a_liar_far_away_does_not_move_the_swarm_average() -> None:
    cfg = GossipConfig(compression="identity", clip_min_neighbours=3, average_dtype="float32")  # exact arithmetic
    x = torch.ones(100)  # ||x̂_i|| = 10: the radius cap, 5, is far above the honest distances
    honest = [CopyView(bytes([k]) * 32, 1, x + 0.01 * v, 0.0, 1, 4) for k, v in ((1, 1), (2, 2), (3, 2))]
    liar = CopyView(b"\x09" * 32, 1, x + 1e4, 0.0, 1, 10**12)  # and it claims to be far ahead
    avg, avg2 = SwarmAverage(cfg), SwarmAverage(cfg)
    avg.update(x, MixView(x, tuple(honest), 10.0), 4)
    avg2.update(x, MixView(x, tuple(honest + [liar]), 10.0), 4)
    # distances 0.1, 0.2, 0.2 (radius 0.2: none clipped). One more copy counts, so the honest
    # pulls shrink from 1/4 to 1/5 each; the liar, 1e5 away, adds 0.2·(0.2/1e5)/5 at most
    # (plain clipping would add 0.2/5)
    assert torch.allclose(avg.weights()[0], x + 0.05 / 4)
    assert float((avg2.weights()[0] - (x + 0.05 / 5)).norm()) < 1e-6


def test_the_estimate_built_piece_by_piece_is_the_whole_vector_formula_bit_for_bit() -> None:
    """Longer than a piece, so the pieces' edges fall inside the vectors."""
    n = 2 * PIECE + 5
    g = torch.Generator().manual_seed(3)
    x, public = torch.randn(n, generator=g), torch.randn(n, generator=g)
    copies = [public + 0.1 * torch.randn(n, generator=g) for _ in range(3)]
    distances = safe_distances(copies, public)
    assert distances == pytest.approx([float(torch.linalg.vector_norm((c - public).double())) for c in copies], rel=1e-6)
    rho = sorted(distances)[1]  # the farthest copy is shortened
    got = swarm_estimate(x, public, list(zip(copies, distances)), rho, power=2.0, progress=1.5)
    shares = [pull_scale(d, rho, 2.0) * 1.5 / (1 + 3 * 1.5) for d in distances]
    carry, total = 1 / 1.5, sum(shares)
    want = x.clone().mul_(1 - (1 - carry) * total)
    for c, s in zip(copies, shares):
        want.add_(c, alpha=s)
    want.add_(public, alpha=-carry * total)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_the_averages_storage_is_three_bytes_a_parameter_unless_float32_is_asked_for() -> None:
    packed, exact = _node(), _node(GossipConfig(swarm="t", compression="identity", average_dtype="float32"))
    for node in (packed, exact):
        node.publish(torch.ones(6), 4, 101.0)
    held = packed.average.ema.value
    assert held.hi.nbytes + held.lo.nbytes == 3 * 6 and isinstance(exact.average.ema.value, torch.Tensor)
    assert torch.equal(packed.average.weights()[0], exact.average.weights()[0])  # 1.0 is exact in both
    with pytest.raises(ValueError, match="average_dtype must be one of"):
        GossipConfig(average_dtype="bfloat16")
