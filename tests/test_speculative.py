"""src/speculative.py: the simulator against closed forms, edge cases and verification policies."""
import numpy as np
import pytest
from scipy.special import stdtrit  # Student-t quantile (scipy.stats is slow to import)

from src.acceptance import expected_speedup_flat, expected_tokens_per_step
from src.baseline import simulate_greedy
from src.costmodel import FlatCostModel
from src.metrics import grid_point_metrics
from src.speculative import simulate_speculative
from tests.helpers import FLAT, point_requests, rngs


@pytest.mark.parametrize("alpha,gamma", [(0.65, 2), (0.65, 8), (0.85, 4), (0.85, 12)])
def test_simulator_agrees_with_closed_form_within_its_ci(alpha, gamma):
    """Point-mass alpha, batch 1, long outputs: tokens per step and speedup match Leviathan et
    al."""
    req = point_requests(alpha, output_tokens=3000, replications=64, per_replication=1)
    (spec,) = simulate_speculative(req, 1, "static_batch", FLAT, [gamma], "ragged", rngs(1))
    greedy = simulate_greedy(req, 1, "static_batch", FLAT)
    per_rep_tokens_per_step = spec.committed_tokens / spec.active_slot_steps
    t = stdtrit(per_rep_tokens_per_step.size - 1, 0.995)
    half = t * per_rep_tokens_per_step.std(ddof=1) / np.sqrt(per_rep_tokens_per_step.size)
    closed = expected_tokens_per_step(alpha, gamma)
    # the last step of a request is capped at the tokens it needs: bias < (gamma + 1) / 3000
    assert abs(per_rep_tokens_per_step.mean() - closed) <= half + closed * (gamma + 1) / 3000
    row = grid_point_metrics(greedy, spec, 1, 0.99)
    expected = expected_speedup_flat(alpha, gamma, 0.2)
    slack = 0.003 * expected
    assert row["speedup_ci_low"] - slack <= expected <= row["speedup_ci_high"] + slack


def test_alpha_near_zero_gives_one_over_one_plus_gamma_c():
    req = point_requests(1e-12, output_tokens=200, replications=8, per_replication=4)
    for gamma in (1, 4, 16):
        (spec,) = simulate_speculative(req, 4, "continuous_refill", FLAT, [gamma], "ragged",
                                       rngs(1))
        greedy = simulate_greedy(req, 4, "continuous_refill", FLAT)
        row = grid_point_metrics(greedy, spec, 4, 0.95)
        assert row["tokens_per_step"] == 1.0
        assert row["speedup"] == pytest.approx(1 / (1 + gamma * 0.2))
        assert row["divergence_penalty"] == pytest.approx(gamma * 0.2 / (1 + gamma * 0.2))


def test_alpha_near_one_gives_gamma_plus_one_tokens_per_step():
    gamma = 5
    # 600 = 100 x 6
    req = point_requests(1 - 1e-12, output_tokens=600, replications=4, per_replication=2)
    (spec,) = simulate_speculative(req, 2, "static_batch", FLAT, [gamma], "ragged", rngs(1))
    assert spec.committed_tokens.sum() / spec.active_slot_steps.sum() == pytest.approx(gamma + 1)
    assert spec.accepted_drafts.sum() == spec.proposed_drafts.sum()


def test_batch_one_lockstep_equals_ragged():
    req = point_requests(0.7, output_tokens=150, replications=32, per_replication=3)
    (ragged,) = simulate_speculative(req, 1, "static_batch", FLAT, [4], "ragged", rngs(1))
    (lockstep,) = simulate_speculative(req, 1, "static_batch", FLAT, [4], "lockstep", rngs(1))
    for field in ("makespan", "steps", "accepted_drafts", "rejected_draft_time"):
        assert np.array_equal(getattr(ragged, field), getattr(lockstep, field)), field


def test_lockstep_advances_the_batch_by_its_weakest_request():
    """One hopeless request (alpha ~ 0) in a batch of otherwise perfect drafts: under lockstep
    everyone commits 1 token per step; under ragged the good ones commit gamma + 1."""
    req = point_requests(1 - 1e-12, output_tokens=120, replications=4, per_replication=4)
    alpha = req.alpha.copy()
    alpha[:, 0] = 1e-12
    req = type(req)(alpha, req.output_len_tokens, req.prompt_len_tokens)
    (lock,) = simulate_speculative(req, 4, "static_batch", FLAT, [3], "lockstep", rngs(1))
    (rag,) = simulate_speculative(req, 4, "static_batch", FLAT, [3], "ragged", rngs(1))
    assert lock.committed_tokens.sum() / lock.active_slot_steps.sum() == pytest.approx(1.0)
    assert np.all(lock.steps == 120)
    assert np.all(rag.steps == 120)  # the hopeless request still needs 120 steps ...
    # ... but the others finish in 30
    assert rag.committed_tokens.sum() / rag.active_slot_steps.sum() > 1.5


def test_gammas_side_by_side_equal_gammas_alone():
    """Several gammas in one call give exactly the numbers of each gamma run alone."""
    req = point_requests(0.75, output_tokens=90, replications=16, per_replication=4)
    together = simulate_speculative(req, 4, "continuous_refill", FLAT, [1, 4, 9], "ragged", rngs(3))
    streams = rngs(3)
    for i, gamma in enumerate([1, 4, 9]):
        (alone,) = simulate_speculative(req, 4, "continuous_refill", FLAT, [gamma], "ragged",
                                        [streams[i]])
        assert np.array_equal(alone.makespan, together[i].makespan)
        assert np.array_equal(alone.accepted_drafts, together[i].accepted_drafts)


def test_tokens_are_conserved_and_time_adds_up():
    req = point_requests(0.6, output_tokens=77, replications=8, per_replication=5)
    (spec,) = simulate_speculative(req, 2, "static_batch", FlatCostModel(0.3), [3], "ragged",
                                   rngs(1))
    assert np.array_equal(spec.committed_tokens, req.output_len_tokens.sum(axis=1))
    assert np.allclose(spec.makespan, spec.draft_time + spec.verify_time)
    assert np.allclose(spec.makespan, spec.steps * (1 + 3 * 0.3))


@pytest.mark.parametrize("rates,gamma", [((0.85, 0.75, 0.65), 2), ((0.85, 0.75, 0.65), 6),
                                         ((0.7, 0.5), 4)])
def test_per_position_simulator_agrees_with_its_closed_form_within_its_ci(rates, gamma):
    """Per-position mode without spread, batch 1, long outputs: tokens per step, acceptance rate and
    flat-cost speedup match 1 + sum_i prod_{j<=i} a_j and its ratios."""
    from src.acceptance import (
        expected_acceptance_rate_per_position,
        expected_speedup_flat_per_position,
        expected_tokens_per_step_per_position,
    )
    from src.config import FixedLength, PerPositionAlpha, UniformLength
    from src.workload import make_requests
    req = make_requests(7, "pp", PerPositionAlpha(rates), FixedLength(3000),
                        UniformLength(100, 200),
                        1, 0, 64, 1)
    assert req.hazard_profile is not None
    (spec,) = simulate_speculative(req, 1, "static_batch", FLAT, [gamma], "ragged", rngs(1))
    greedy = simulate_greedy(req, 1, "static_batch", FLAT)
    per_rep = spec.committed_tokens / spec.active_slot_steps
    t = stdtrit(per_rep.size - 1, 0.995)
    half = t * per_rep.std(ddof=1) / np.sqrt(per_rep.size)
    closed = expected_tokens_per_step_per_position(rates, gamma)
    assert abs(per_rep.mean() - closed) <= half + closed * (gamma + 1) / 3000
    rate = spec.accepted_drafts / spec.proposed_drafts
    half_rate = t * rate.std(ddof=1) / np.sqrt(rate.size)
    assert abs(rate.mean()
               - expected_acceptance_rate_per_position(rates, gamma)) <= half_rate + 1e-3
    row = grid_point_metrics(greedy, spec, 1, 0.99)
    expected = expected_speedup_flat_per_position(rates, gamma, 0.2)
    slack = 0.003 * expected
    assert row["speedup_ci_low"] - slack <= expected <= row["speedup_ci_high"] + slack


def test_per_position_spread_gives_each_request_its_scaled_rates():
    """With a spread, each replication (one long request) commits the closed form at its own
    rates a_i^s, s = ln(alpha) / ln(geometric-mean rate)."""
    from src.acceptance import expected_tokens_per_step_per_position, mean_hazard
    from src.config import FixedLength, PerPositionAlpha, UniformLength
    from src.workload import make_requests
    rates, gamma = (0.9, 0.8, 0.6), 5
    req = make_requests(8, "pp", PerPositionAlpha(rates, spread=0.4), FixedLength(4000),
                        UniformLength(100, 200), 1, 0, 96, 1)
    scale = -np.log(req.alpha[:, 0]) / mean_hazard(rates)
    assert scale.std() > 0.2  # the spread is there
    (spec,) = simulate_speculative(req, 1, "static_batch", FLAT, [gamma], "ragged", rngs(2))
    closed = np.array([expected_tokens_per_step_per_position(np.asarray(rates) ** s, gamma)
                       for s in scale])
    diff = spec.committed_tokens / spec.active_slot_steps - closed
    t = stdtrit(diff.size - 1, 0.995)
    assert abs(diff.mean()) <= t * diff.std(ddof=1) / np.sqrt(diff.size) + (gamma + 1) / 4000
