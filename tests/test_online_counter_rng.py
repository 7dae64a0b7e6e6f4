"""The serving engine's counter-based acceptance draws (src/online/counter_rng.py): the i.i.d. and
per-position laws of K against their closed forms, and the per-position path's identity with the
i.i.d. one when the hazard profile is D_i = i."""

import numpy as np

from src.acceptance import (
    expected_tokens_per_step,
    expected_tokens_per_step_per_position,
    hazard_profile,
    mean_hazard,
)
from src.online.counter_rng import accepted_drafts, request_keys
from src.workload import stream

EAGLE_RATES = (0.79, 0.74, 0.72, 0.73, 0.67)  # configs/scenarios/h100-llama8b-eagle.toml
N_DRAWS = 200_000


def _mean_with_ci(k: np.ndarray) -> tuple[float, float]:
    """Mean and a 4-sigma half-width (a false failure about once in 16,000 runs)."""
    return float(k.mean()), 4.0 * float(k.std(ddof=1)) / np.sqrt(k.size)


def test_per_position_mean_accepted_matches_the_closed_form():
    """E[K] = sum_{i <= gamma} prod_{j <= i} a_j (src/acceptance.py) over many counters of a few
    keys, for the EAGLE scenario's rates, at gammas inside and past the given positions."""
    keys = np.repeat(request_keys(stream(1, "keys"), 4), N_DRAWS // 4)
    counters = np.tile(np.arange(N_DRAWS // 4), 4)
    alpha = np.full(N_DRAWS, np.exp(-mean_hazard(EAGLE_RATES)))  # the median request (s = 1)
    profile = hazard_profile(EAGLE_RATES, 8)
    for gamma in (1, 3, 5, 8):
        k = accepted_drafts(keys, counters, alpha, gamma, profile)
        mean, half = _mean_with_ci(k)
        expected = expected_tokens_per_step_per_position(EAGLE_RATES, gamma) - 1.0
        assert abs(mean - expected) < half, (gamma, mean, expected, half)
        assert k.min() == 0 and k.max() == gamma
    # over the five given positions, falling rates accept more drafts than their geometric mean
    # would i.i.d. (closed forms 2.31 and 2.14): the first positions beat it, the product matches
    k_iid = accepted_drafts(keys, counters, alpha, 5)
    assert accepted_drafts(keys, counters, alpha, 5, profile).mean() > k_iid.mean() + 0.1


def test_iid_mean_accepted_matches_the_closed_form():
    keys = request_keys(stream(2, "keys"), N_DRAWS)
    for alpha, gamma in ((0.6, 3), (0.85, 6)):
        k = accepted_drafts(keys, np.zeros(N_DRAWS, np.int64), np.full(N_DRAWS, alpha), gamma)
        mean, half = _mean_with_ci(k)
        assert abs(mean - (expected_tokens_per_step(alpha, gamma) - 1.0)) < half


def test_profile_of_equal_steps_is_the_iid_path_bit_for_bit():
    """D_i = i is i.i.d. acceptance: the profile path gives exactly the i.i.d. K for every draw,
    with per-draw alphas and gammas (0 included) broadcast as the engine passes them."""
    rng = np.random.default_rng(7)
    n = 50_000
    keys = request_keys(stream(3, "keys"), n)
    counters = rng.integers(0, 10_000, n)
    alpha = rng.uniform(0.01, 0.999, n)
    gamma = rng.integers(0, 17, n)
    iid = accepted_drafts(keys, counters, alpha, gamma)
    steps = np.arange(1.0, 17.0)
    np.testing.assert_array_equal(accepted_drafts(keys, counters, alpha, gamma, steps), iid)
    # the [rows, slots, steps] shape of the engine's stretches
    k3 = accepted_drafts(keys[:100, None, None], counters[:100, None, None] + np.arange(5),
                         alpha[:100, None, None], gamma[:100, None, None], steps)
    np.testing.assert_array_equal(
        k3, accepted_drafts(keys[:100, None, None], counters[:100, None, None] + np.arange(5),
                            alpha[:100, None, None], gamma[:100, None, None]))
