"""src/acceptance.py: the sampled acceptance law against its closed forms (Leviathan et al. 2023)."""
import numpy as np
import pytest

from src.acceptance import (
    expected_acceptance_rate, expected_speedup_flat, expected_tokens_per_step, sample_accepted_drafts,
)


@pytest.mark.parametrize("alpha,gamma", [(0.3, 1), (0.65, 4), (0.85, 6), (0.95, 16)])
def test_sampled_law_matches_the_capped_geometric(alpha, gamma):
    rng = np.random.default_rng(1)
    k = sample_accepted_drafts(rng, np.full(400_000, alpha), gamma)
    assert k.min() >= 0 and k.max() <= gamma
    expected = np.array([alpha**j * (1 - alpha) for j in range(gamma)] + [alpha**gamma])
    observed = np.bincount(k, minlength=gamma + 1) / k.size
    # each frequency within 5 binomial standard errors
    se = np.sqrt(expected * (1 - expected) / k.size)
    assert np.all(np.abs(observed - expected) <= 5 * se + 1e-12)
    mean_tokens = (k + 1).mean()
    assert mean_tokens == pytest.approx(expected_tokens_per_step(alpha, gamma), abs=5 * (k + 1).std() / np.sqrt(k.size))


def test_closed_forms_agree_with_each_other():
    for alpha in (0.2, 0.5, 0.8):
        for gamma in (1, 3, 8):
            tokens = expected_tokens_per_step(alpha, gamma)
            # E[K + 1] = 1 + gamma * acceptance rate
            assert tokens == pytest.approx(1 + gamma * expected_acceptance_rate(alpha, gamma))
            assert tokens == pytest.approx(sum(alpha**j for j in range(gamma + 1)))


def test_leviathan_limits():
    # alpha -> 0: one token per step, so the speedup is 1 / (1 + gamma c)
    assert expected_speedup_flat(1e-9, 4, 0.2) == pytest.approx(1 / 1.8)
    # alpha -> 1: gamma + 1 tokens per step
    assert expected_tokens_per_step(1 - 1e-9, 5) == pytest.approx(6, rel=1e-6)
    # Leviathan et al. 2023, Table/Fig. 3 style point: alpha 0.8, gamma 3, c 0.05 -> 2.95 / 1.15
    assert expected_speedup_flat(0.8, 3, 0.05) == pytest.approx((1 - 0.8**4) / 0.2 / 1.15)
