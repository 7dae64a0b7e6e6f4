"""src/baseline.py and the serving loop: one token per active request per step; serving modes."""
import numpy as np

from src.baseline import simulate_greedy
from src.config import PointAlpha, UniformLength
from src.serving import simulate_steps
from src.workload import make_requests
from tests.helpers import FLAT, point_requests


def varied_requests(replications=6, per_replication=12):
    return make_requests(3, "x", PointAlpha(0.5), UniformLength(5, 40), UniformLength(10, 20), 4, 0,
                         replications, per_replication)


def test_greedy_commits_exactly_one_token_per_active_request_per_step():
    req = varied_requests()
    record = simulate_steps(req, 4, "continuous_refill", "greedy")
    assert np.array_equal(record.tokens, record.seqs)
    assert np.array_equal(record.rep_slot_steps, req.output_len_tokens.sum(axis=1))
    # a request of L tokens is active for exactly L consecutive steps
    assert np.array_equal(record.last_step - record.first_step + 1, req.output_len_tokens)


def test_static_batch_makespan_is_the_sum_of_each_batch_longest_request():
    req = varied_requests()
    stats = simulate_greedy(req, 4, "static_batch", FLAT)
    expected = req.output_len_tokens.reshape(6, 3, 4).max(axis=2).sum(axis=1)
    assert np.array_equal(stats.makespan, expected)


def test_continuous_refill_keeps_slots_busy_while_requests_are_queued():
    N, B = 12, 4
    req = varied_requests(per_replication=N)
    record = simulate_steps(req, B, "continuous_refill", "greedy")
    for r in range(req.shape[0]):
        first = record.rep_first_step[r]
        last_admission = record.first_step[r, N - 1]  # the queue is not empty before this step
        assert np.all(record.seqs[first:last_admission] == B)
        assert last_admission - first > 10
    stats = simulate_greedy(req, B, "continuous_refill", FLAT)
    static = simulate_greedy(req, B, "static_batch", FLAT)
    assert np.all(stats.makespan <= static.makespan)
    utilization = stats.active_slot_steps.sum() / (B * stats.steps.sum())
    assert utilization > static.active_slot_steps.sum() / (B * static.steps.sum())


def test_continuous_refill_greedy_makespan_is_list_scheduling():
    """Greedy, continuous refill, 1 time unit per step: the makespan equals list scheduling of
    the lengths onto B machines in queue order (each request to the earliest free slot)."""
    req = varied_requests(replications=3)
    stats = simulate_greedy(req, 4, "continuous_refill", FLAT)
    for r in range(3):
        free_at = [0] * 4
        for length in req.output_len_tokens[r]:
            i = int(np.argmin(free_at))
            free_at[i] += int(length)
        assert stats.makespan[r] == max(free_at)


def test_point_requests_helper_has_fixed_lengths():
    req = point_requests(0.5, 30, 2, 3)
    assert np.all(req.output_len_tokens == 30)
