"""MCD-DTW: exact values on hand-computed cases, the dB reading, and what it ranks on signals."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from gossip_tts.audio.mcd import (
    MCD_SCALE,
    MelCepstrumConfig,
    cepstra_from_log_mel,
    dtw_path,
    frame_mcd,
    mcd_dtw,
    mcd_dtw_cepstra,
    mel_cepstra,
)

SR = 22050


def _tones(freqs_per_segment: list[tuple[float, ...]], seconds: list[float], seed: int = 0) -> np.ndarray:
    """Segments of harmonic-ish tones plus a little noise: a stand-in for phones of speech."""
    rng = np.random.default_rng(seed)
    parts = []
    for freqs, sec in zip(freqs_per_segment, seconds):
        t = np.arange(int(sec * SR)) / SR
        parts.append(sum(np.sin(2 * np.pi * f * t) for f in freqs) / len(freqs))
    wav = np.concatenate(parts)
    return (0.3 * wav + 0.003 * rng.standard_normal(wav.size)).astype(np.float32)


PHONES = [(220.0, 660.0, 1320.0), (300.0, 2400.0), (180.0, 540.0, 900.0, 3000.0), (500.0, 1500.0)]
OTHER = [(4000.0, 6000.0), (120.0,), (7000.0, 9000.0), (2600.0, 5200.0)]


def _brute_force_least_cost(cost: np.ndarray) -> float:
    """The DTW optimum by plain nested loops, as a reference for the vectorised version."""
    ta, tb = cost.shape
    acc = np.full((ta, tb), np.inf)
    for i, j in itertools.product(range(ta), range(tb)):
        prev = [acc[i - 1, j - 1] if i and j else np.inf, acc[i - 1, j] if i else np.inf, acc[i, j - 1] if j else np.inf]
        acc[i, j] = cost[i, j] + (0.0 if i == j == 0 else min(prev))
    return float(acc[-1, -1])


def test_identical_signals_score_exactly_zero() -> None:
    wav = _tones(PHONES, [0.2, 0.3, 0.25, 0.2])
    assert mcd_dtw(wav, wav, SR) == 0.0


def test_hand_computed_two_frames_against_three() -> None:
    # a = [0, 0], [3, 4]; b = [0, 0], [3, 4], [0, 0]. Both end frames must pair, so [3, 4] meets
    # [0, 0] at least once: (10/ln10)·sqrt(2·(9 + 16)) = (10/ln10)·5·√2. The least-cost path is
    # (0,0), (1,1), (1,2): one unequal pair out of three. c0 (first column) differs wildly and
    # must not count.
    a = np.array([[7.0, 0.0, 0.0], [-3.0, 3.0, 4.0]])
    b = np.array([[0.0, 0.0, 0.0], [100.0, 3.0, 4.0], [1.0, 0.0, 0.0]])
    assert mcd_dtw_cepstra(a, b) == pytest.approx(10 / math.log(10) * 5 * math.sqrt(2) / 3, rel=1e-12)
    assert dtw_path(frame_mcd(a, b)) == [(0, 0), (1, 1), (1, 2)]


def test_hand_computed_path_is_least_summed_cost() -> None:
    # One coefficient: a = 0, 1, 2 and b = 0, 2; cost (in units of (10/ln10)·√2) is |a_i − b_j|:
    #   [[0, 2], [1, 1], [2, 0]]. The least sum is 1 over three pairs, e.g. (0,0), (1,0), (2,1).
    a = np.array([[0.0, 0.0], [0.0, 1.0], [0.0, 2.0]])
    b = np.array([[0.0, 0.0], [0.0, 2.0]])
    unit = MCD_SCALE * math.sqrt(2)
    assert np.allclose(frame_mcd(a, b), unit * np.array([[0, 2], [1, 1], [2, 0]]))
    assert mcd_dtw_cepstra(a, b) == pytest.approx(unit / 3, rel=1e-12)
    path = dtw_path(frame_mcd(a, b))
    assert path[0] == (0, 0) and path[-1] == (2, 1) and len(path) == 3


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (6, 1), (7, 9), (12, 4)])
def test_dtw_matches_a_brute_force_dynamic_programme(shape: tuple[int, int]) -> None:
    cost = np.random.default_rng(sum(shape)).random(shape)
    path = dtw_path(cost)
    assert path[0] == (0, 0) and path[-1] == (shape[0] - 1, shape[1] - 1)
    for (i0, j0), (i1, j1) in zip(path, path[1:]):
        assert (i1 - i0, j1 - j0) in {(1, 1), (1, 0), (0, 1)}
    assert sum(cost[i, j] for i, j in path) == pytest.approx(_brute_force_least_cost(cost), rel=1e-12)


def test_time_stretched_copy_scores_far_lower_than_a_different_signal() -> None:
    seconds = [0.2, 0.3, 0.25, 0.2]
    wav = _tones(PHONES, seconds, seed=0)
    stretched = _tones(PHONES, [1.6 * s for s in seconds], seed=1)  # same phones, slower, other noise
    other = _tones(OTHER, seconds, seed=2)
    same, different = mcd_dtw(wav, stretched, SR), mcd_dtw(wav, other, SR)
    assert same < 0.25 * different, (same, different)
    # DTW is what makes the stretched copy close: pairing frames in order (no warping) does not.
    a, b = mel_cepstra(wav, SR), mel_cepstra(stretched, SR)
    in_order = float(np.mean(np.diag(frame_mcd(a, b[: len(a)]))))
    assert same < 0.5 * in_order, (same, in_order)


def test_loudness_alone_costs_nothing() -> None:
    """A gain only shifts c0, which MCD leaves out (white noise keeps every band above the floor)."""
    wav = np.random.default_rng(3).standard_normal(SR // 2)
    assert mcd_dtw(wav, 4.0 * wav, SR) == pytest.approx(0.0, abs=1e-9)


def test_mcd_is_the_rms_db_difference_of_mean_removed_log_mel_spectra() -> None:
    """With every coefficient kept (D = M − 1) the MCD formula is exactly the RMS difference, in dB
    (20·log10 of amplitude), of the two log-mel spectra after removing each one's mean level."""
    rng = np.random.default_rng(4)
    la, lb = rng.normal(size=(5, 16)), rng.normal(size=(5, 16))  # natural-log amplitudes
    ca, cb = cepstra_from_log_mel(la), cepstra_from_log_mel(lb)
    diff = (la - la.mean(1, keepdims=True)) - (lb - lb.mean(1, keepdims=True))
    rms_db = 20 / math.log(10) * np.sqrt(np.mean(diff**2, axis=1))
    assert np.allclose(np.diag(frame_mcd(ca, cb)), rms_db, rtol=1e-12)
    # and the cepstra rebuild the log spectrum: L_m = c0 + Σ_d c_d cos(π d (m + ½) / M)
    m = np.arange(16)
    rebuilt = ca[:, :1] + sum(ca[:, d : d + 1] * np.cos(np.pi * d * (m + 0.5) / 16) for d in range(1, 16))
    assert np.allclose(rebuilt, la, atol=1e-12)


def test_mel_cepstra_shape_and_order() -> None:
    cfg = MelCepstrumConfig(n_mels=40, n_ceps=13)
    c = mel_cepstra(np.zeros(SR, dtype=np.float32), SR, cfg)
    assert c.shape == (1 + SR // 256, 14) and np.isfinite(c).all()
    assert mel_cepstra(np.ones(10), SR).shape == (1, 25)  # shorter than a window still gives a frame


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: mel_cepstra(np.zeros((2, 100)), SR), "mono 1-D"),
        (lambda: mel_cepstra(np.array([0.0, np.nan]), SR), "NaN"),
        (lambda: frame_mcd(np.zeros((3, 5)), np.zeros((3, 4))), "differ in order"),
        (lambda: frame_mcd(np.zeros((0, 5)), np.zeros((3, 5))), "frames >= 1"),
        (lambda: dtw_path(np.full((2, 2), np.inf)), "finite"),
        (lambda: MelCepstrumConfig(n_mels=24, n_ceps=24), "n_ceps < n_mels"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
