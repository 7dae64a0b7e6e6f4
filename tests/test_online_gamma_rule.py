"""The schedule rule of src/online/gamma_rule.py: every batch size within the tolerance of its
best gamma, with the fewest ranges that allows (checked against an exhaustive search)."""
import numpy as np
import pytest

from src.online.gamma_rule import rises, tolerant_gammas, tops_out
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
    assert len(compress_schedule(g).ranges) == fewest_ranges(by_gamma, tol)


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
    from src.online.gamma_rule import MAX_RANGES, capped_gammas, n_ranges

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
