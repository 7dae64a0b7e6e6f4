"""src/metrics.py: the ratio estimator and its delta-method confidence interval; best gamma."""
import numpy as np
import pandas as pd
import pytest

from src.metrics import best_gamma, ratio_ci


def test_exact_ratio_has_zero_width():
    den = np.array([3.0, 5.0, 7.0, 11.0])
    ratio, low, high = ratio_ci(2 * den, den, 0.95)
    assert ratio == pytest.approx(2) and low == pytest.approx(2) and high == pytest.approx(2)


def test_ratio_of_sums_not_mean_of_ratios():
    ratio, _, _ = ratio_ci(np.array([1.0, 9.0]), np.array([1.0, 1.0]), 0.95)
    assert ratio == 5.0
    ratio, _, _ = ratio_ci(np.array([2.0, 2.0]), np.array([1.0, 3.0]), 0.95)
    assert ratio == 1.0  # mean of ratios would be 1.33


def test_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = 0
    trials = 2000
    for _ in range(trials):
        den = rng.gamma(20, 1.0, 30)
        num = 1.5 * den + rng.normal(0, 1.0, 30)
        _, low, high = ratio_ci(num, den, 0.95)
        hits += low <= 1.5 <= high
    assert 0.93 <= hits / trials <= 0.97


def test_best_gamma_turns_speculation_off_when_nothing_beats_greedy():
    df = pd.DataFrame({"batch_size": [1, 1, 64, 64], "gamma": [2, 4, 2, 4],
                       "speedup": [1.5, 1.7, 0.9, 0.8]})
    best = best_gamma(df, ["batch_size"]).set_index("batch_size")
    assert best.loc[1, "schedule_gamma"] == 4 and best.loc[64, "schedule_gamma"] == 0
