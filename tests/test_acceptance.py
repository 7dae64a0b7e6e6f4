"""src/acceptance.py: sampled acceptance laws (i.i.d. and per-position) against closed forms."""
import numpy as np
import pytest

from src.acceptance import (
    accepted_drafts_from_exponentials,
    expected_acceptance_rate,
    expected_acceptance_rate_per_position,
    expected_speedup_flat,
    expected_speedup_flat_per_position,
    expected_tokens_per_step,
    expected_tokens_per_step_per_position,
    expected_tokens_per_step_profile,
    hazard_profile,
    iid_alpha_from_tokens_per_step,
    mean_hazard,
    position_rates,
    sample_accepted_drafts,
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
    assert mean_tokens == pytest.approx(expected_tokens_per_step(alpha, gamma),
                                        abs=5 * (k + 1).std() / np.sqrt(k.size))


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


# --- per-position acceptance ----------------------------------------------------------------------


@pytest.mark.parametrize("rates,gamma", [
    ((0.8, 0.7, 0.6), 2),  # gamma inside the given positions
    ((0.8, 0.7, 0.6), 7),  # positions 4..7 reuse a_3
    ((0.9, 1.0, 0.5, 0.75), 5),  # a rate of 1: that position is always accepted once reached
    ((0.3, 0.95), 6),  # rising rates are allowed too
])
def test_per_position_sampler_matches_the_product_of_rates(rates, gamma):
    """P(K >= i) = a_1 ... a_i for every i <= gamma, K <= gamma, and E[K + 1] the closed form."""
    rng = np.random.default_rng(2)
    alpha = np.full(400_000, np.exp(-mean_hazard(rates)))  # the representative rate at scale 1
    k = sample_accepted_drafts(rng, alpha, gamma, hazard_profile(rates, 64))
    assert k.min() >= 0 and k.max() <= gamma
    survival = np.cumprod(position_rates(rates, gamma))
    observed = np.array([(k >= i).mean() for i in range(1, gamma + 1)])
    se = np.sqrt(survival * (1 - survival) / k.size)
    assert np.all(np.abs(observed - survival) <= 5 * se + 1e-12)
    closed = expected_tokens_per_step_per_position(rates, gamma)
    assert (k + 1).mean() == pytest.approx(closed, abs=5 * (k + 1).std() / np.sqrt(k.size))


def test_per_request_scale_raises_every_rate_to_its_power():
    """A request at scale s has rates a_i^s: its representative alpha is exp(-s Cbar)."""
    rates, s, gamma = (0.85, 0.7, 0.65), 1.7, 5
    rng = np.random.default_rng(3)
    alpha = np.full(400_000, np.exp(-s * mean_hazard(rates)))
    k = sample_accepted_drafts(rng, alpha, gamma, hazard_profile(rates, 64))
    scaled = np.asarray(rates) ** s
    closed = expected_tokens_per_step_per_position(scaled, gamma)
    assert (k + 1).mean() == pytest.approx(closed, abs=5 * (k + 1).std() / np.sqrt(k.size))
    assert expected_tokens_per_step_profile(alpha[0], gamma,
                                            hazard_profile(rates, 64)) == pytest.approx(closed)


def test_iid_is_the_special_case_with_unit_hazard_steps():
    """With C_i = i the generalised sampler is exactly floor(E / -ln alpha), capped at gamma."""
    rng = np.random.default_rng(4)
    draws = rng.standard_exponential((1000, 8))
    alpha = rng.uniform(0.01, 0.99, (1000, 8))
    gamma = np.arange(1, 1001)[:, None] % 17 + 1
    iid = accepted_drafts_from_exponentials(draws, alpha, gamma)
    general = accepted_drafts_from_exponentials(draws, alpha, gamma, np.arange(1.0, 65.0))
    assert np.array_equal(iid, general)
    # equal rates are i.i.d. acceptance: no profile, so the reference study's path is used
    assert hazard_profile((0.7, 0.7, 0.7), 64) is None


def test_per_position_closed_forms_reduce_to_leviathan_and_agree_with_each_other():
    for alpha in (0.3, 0.8):
        for gamma in (1, 4, 9):
            assert expected_tokens_per_step_per_position([alpha], gamma) == pytest.approx(
                float(expected_tokens_per_step(alpha, gamma)))
            assert expected_speedup_flat_per_position([alpha], gamma, 0.1) == pytest.approx(
                float(expected_speedup_flat(alpha, gamma, 0.1)))
    rates = (0.8, 0.6, 0.5)
    for gamma in (1, 3, 6):
        tokens = expected_tokens_per_step_per_position(rates, gamma)
        assert tokens == pytest.approx(1 + gamma
                                       * expected_acceptance_rate_per_position(rates, gamma))
    # by hand: 1 + 0.8 + 0.48 + 0.24 + 0.12 = 2.64 at gamma 4 (position 4 reuses 0.5)
    assert expected_tokens_per_step_per_position(rates, 4) == pytest.approx(2.64)


def test_decaying_rates_make_deep_drafts_worth_less_than_iid_says():
    """Same first-position rate: with decay, extra positions add less than under i.i.d."""
    decay, iid = (0.8, 0.7, 0.6, 0.5), (0.8,)
    gains = [expected_tokens_per_step_per_position(r, 8)
             - expected_tokens_per_step_per_position(r, 4)
             for r in (decay, iid)]
    assert gains[0] < gains[1] / 2


@pytest.mark.parametrize("alpha,gamma", [(0.05, 1), (0.55, 3), (0.9, 8), (0.99, 16)])
def test_iid_inversion_recovers_alpha(alpha, gamma):
    tau = float(expected_tokens_per_step(alpha, gamma))
    assert iid_alpha_from_tokens_per_step(tau, gamma) == pytest.approx(alpha, rel=1e-9)


def test_iid_inversion_rejects_lengths_outside_its_range():
    for tau in (1.0, 0.5, 5.0, 6.0):
        with pytest.raises(ValueError):
            iid_alpha_from_tokens_per_step(tau, 4)
