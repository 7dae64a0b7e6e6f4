"""The schedule rule of src/gamma_rule.py: every batch size within the tolerance of its
best gamma, with the fewest ranges that allows (checked against an exhaustive search)."""
import numpy as np
import pytest

from src.gamma_rule import rises, tolerant_gammas, tops_out
from src.online.policies import compress_schedule


def fewest_ranges(by_gamma: np.ndarray, tol: float) -> int:
    """Dynamic programme over batch prefixes: the least number of ranges, each with one gamma
    admissible (within tol of the best) at every batch of the range."""
    s = by_gamma[:, 1:].copy()
    s[0] = 1.0
    ok = s * (1 + tol) >= s.max(axis=0)
    n = s.shape[1]
    best = [0] + [10**9] * n
    for end in range(1, n + 1):
        for start in range(end):
            if ok[:, start:end].all(axis=1).any():
                best[end] = min(best[end], best[start] + 1)
    return best[n]


def fewest_ranges_without_small_rises(by_gamma: np.ndarray, tol: float) -> int:
    """The same programme over (batch prefix, last range's gamma), where a range whose gamma is
    above the previous range's must be faster than it by more than tol at its first batch."""
    s = by_gamma[:, 1:].copy()
    s[0] = 1.0
    ok = s * (1 + tol) >= s.max(axis=0)
    n_gamma, n = s.shape
    big = 10**9
    best = np.full((n + 1, n_gamma), big)
    for end in range(1, n + 1):
        for start in range(end):
            for g in np.nonzero(ok[:, start:end].all(axis=1))[0]:
                if start == 0:
                    best[end, g] = 1
                    continue
                prev = [p for p in range(n_gamma) if best[start, p] < big
                        and (g <= p or s[g, start] >= (1 + tol) * s[p, start])]
                if prev:
                    best[end, g] = min(best[end, g], min(best[start, p] for p in prev) + 1)
    return int(best[n].min())


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("tol", [0.0, 0.01, 0.03])
def test_each_batch_within_tolerance_with_the_fewest_ranges(seed, tol):
    rng = np.random.default_rng(seed)
    n_gamma, n_batch = 6, 24
    trend = 1.6 - np.linspace(0, 0.8, n_batch)[None, :] * np.arange(n_gamma)[:, None] / 3
    by_gamma = np.ones((n_gamma, n_batch + 1))
    by_gamma[1:, 1:] = (trend + rng.normal(0, 0.02, (n_gamma, n_batch)))[1:]
    g = tolerant_gammas(by_gamma, tol)
    cols = np.arange(1, n_batch + 1)
    s = by_gamma.copy()
    s[0] = 1.0
    assert np.all(s[g[1:], cols] * (1 + tol) >= s[:, 1:].max(axis=0) - 1e-12)
    # every rise is worth more than the tolerance where it happens (issue 24, section 6)
    assert all(s[g1, b] >= (1 + tol) * s[g0, b] for b, g0, g1 in rises(g))
    n = len(compress_schedule(g).ranges)
    assert n == fewest_ranges_without_small_rises(by_gamma, tol)
    assert n >= fewest_ranges(by_gamma, tol)


def test_a_rise_smaller_than_the_tolerance_is_not_taken():
    """At batch 3 gamma 2 stops being admissible; gamma 4 (2% above it) would reach farthest,
    gamma 3 (8% above it, the best there) is the one worth rising to."""
    by_gamma = np.array([[1, 1, 1, 1, 1, 1],
                         [1, 1.2, 1.2, 1.2, 1.2, 1.2],
                         [1, 1.5, 1.5, 1.30, 1.30, 1.30],
                         [1, 1.4, 1.4, 1.40, 1.0, 1.0],
                         [1, 1.0, 1.0, 1.33, 1.36, 1.36]], float)
    g = tolerant_gammas(by_gamma, 0.06)
    assert list(g[1:]) == [2, 2, 3, 4, 4]
    assert rises(g) == [(3, 2, 3), (4, 3, 4)]  # by 7.7% and 36%; 2 -> 4 would be 2.3%


def test_tolerance_zero_is_the_per_batch_best_and_flat_gains_do_not_switch():
    by_gamma = np.array([[1, 1, 1, 1, 1],
                         [1, 1.30, 1.31, 1.29, 1.30],
                         [1, 1.31, 1.30, 1.30, 1.29]], float)
    assert list(tolerant_gammas(by_gamma, 0.0)[1:]) == [2, 1, 2, 1]
    assert list(tolerant_gammas(by_gamma, 0.02)[1:]) == [1, 1, 1, 1]


def test_speculation_off_where_no_gamma_beats_greedy_by_the_tolerance():
    by_gamma = np.array([[1, 1, 1, 1, 1], [1, 1.5, 1.005, 0.9, 1.005]], float)
    # batch 2 admits both (0.5% apart): gamma 1 carries on; batch 3 admits only greedy, and
    # batch 4's 0.5% gain is no reason to switch back on
    assert list(tolerant_gammas(by_gamma, 0.01)[1:]) == [1, 1, 0, 0]


def test_rises_and_tops_out():
    assert rises(np.array([0, 4, 4, 3, 5, 5, 2])) == [(4, 3, 5)]
    assert tops_out(np.array([8, 7]), 8) and not tops_out(np.array([7, 6]), 8)


def test_a_schedule_is_capped_at_six_ranges_by_widening_the_tolerance():
    from src.gamma_rule import MAX_RANGES, capped_gammas, n_ranges

    # gammas 1 and 2 alternate as the best every batch size, by 4%: 40 ranges at 2%
    n = 40
    by = np.ones((3, n + 1))
    by[1, 1:] = np.where(np.arange(n) % 2 == 0, 1.30, 1.25)
    by[2, 1:] = np.where(np.arange(n) % 2 == 0, 1.25, 1.30)
    assert n_ranges(tolerant_gammas(by, 0.02)) == n
    gammas, used = capped_gammas(by, 0.02)
    assert n_ranges(gammas) <= MAX_RANGES and used > 0.04  # 1.30 / 1.25 = 4% must be tolerated
    assert used <= 0.04 * 1.25 * 1.25  # the first x 1.25 step past 4%
    # the tolerance asked for is kept where it already gives few ranges; 0 is taken literally
    assert capped_gammas(by, 0.05)[1] == 0.05
    assert n_ranges(capped_gammas(by, 0.0)[0]) == n
