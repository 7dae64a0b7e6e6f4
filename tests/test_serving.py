"""src/serving.py and src/step_engine.py against a plain step-by-step loop over [R, B] masks.

With alpha ~ 1 (every draft accepted) or alpha ~ 0 (none) speculative decoding is deterministic,
so the compiled step-space engine plus the vectorised pricing must reproduce, up to rounding, what
a naive loop gets by asking the cost model for each step's time from the slots' masks and contexts:
the same makespans, latencies and time shares, under the flat and the hardware cost models, with
and without a draft KV budget.
"""
import dataclasses

import numpy as np
import pytest

from src.costmodel import FlatCostModel
from src.hardware.scenario import SCENARIOS_DIR, default_hardware_scenario, load_scenario
from src.serving import serve, simulate_steps
from src.workload import Requests
from tests.helpers import FLAT, point_requests


def reference_loop(req: Requests, B: int, serving: str, cost, gamma: int, accepted: int):
    """(makespan, latency_sum, draft_time, rejected_draft_time) [R] from a plain Python loop in
    which every active sequence accepts `accepted` drafts per step (gamma 0: greedy)."""
    R, N = req.shape
    out = np.zeros((4, R))
    for r in range(R):
        slot_req, remaining, context = [-1] * B, np.zeros(B, int), np.zeros(B, int)
        queued, clock, admitted = 0, 0.0, {}

        def admit(s):
            nonlocal queued
            slot_req[s], remaining[s] = queued, req.output_len_tokens[r, queued]
            context[s], admitted[queued] = req.prompt_len_tokens[r, queued], clock
            queued += 1

        while True:
            if not remaining.any():
                if queued == N:
                    break
                for s in range(min(B, N - queued)):
                    admit(s)
            active = (remaining > 0)[None, :]
            ctx = context[None, :]
            verify = float(cost.target_pass_time(active, gamma + 1, ctx)[0])
            draft = float(cost.draft_passes_time(active, gamma, ctx)[0]) if gamma else 0.0
            commit = np.where(remaining > 0, np.minimum(accepted + 1 if gamma else 1, remaining), 0)
            kept = commit.sum() - active.sum()
            clock += verify + draft
            out[2, r] += draft
            out[3, r] += draft * (1 - kept / (gamma * active.sum())) if gamma else 0.0
            remaining -= commit
            context += commit
            for s in range(B):
                if commit[s] and remaining[s] == 0:
                    out[1, r] += clock - admitted[slot_req[s]]
                    if serving == "continuous_refill" and queued < N:
                        admit(s)
        out[0, r] = clock
    return out


def varied(alpha: float, replications=3, per_replication=7, prompt=(40, 900), seed=3) -> Requests:
    rng = np.random.default_rng(seed)
    shape = (replications, per_replication)
    return Requests(np.full(shape, alpha), rng.integers(5, 40, shape),
                    rng.integers(*prompt, shape))


COSTS = {
    "flat": FLAT,
    "h100 vllm-2024": default_hardware_scenario().cost_model("vllm-2024"),
    "h100 vllm-v1": default_hardware_scenario().cost_model("vllm-v1"),
    # self-speculation with a 512-token draft KV budget: prompts below and above it
    "magicdec budget": load_scenario(SCENARIOS_DIR
                                     / "check-magicdec-table1.toml").cost_model("ideal"),
}


@pytest.mark.parametrize("cost_name", list(COSTS))
@pytest.mark.parametrize("serving", ["static_batch", "continuous_refill"])
@pytest.mark.parametrize("decoder,alpha,gamma,accepted", [
    ("greedy", 0.5, 0, 0), ("ragged", 1 - 1e-12, 3, 3), ("ragged", 1e-12, 4, 0),
    ("lockstep", 1 - 1e-12, 2, 2)])
def test_engine_matches_a_plain_step_loop(cost_name, serving, decoder, alpha, gamma, accepted):
    cost, B = COSTS[cost_name], 3
    req = varied(alpha)
    stats = serve(req, B, serving, cost, decoder, gamma, np.random.default_rng(0))
    makespan, latency, draft, rejected = reference_loop(req, B, serving, cost, gamma, accepted)
    np.testing.assert_allclose(stats.makespan, makespan, rtol=1e-9)
    np.testing.assert_allclose(stats.latency_sum, latency, rtol=1e-9)
    np.testing.assert_allclose(stats.draft_time, draft, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stats.rejected_draft_time, rejected, rtol=1e-9, atol=1e-9)


class NotFixed:
    """FlatCostModel without fixed_pass_times: forces the per-step pricing path."""

    def __init__(self, flat: FlatCostModel):
        self.flat, self.time_unit = flat, flat.time_unit

    def target_pass_time_totals(self, *a):
        return self.flat.target_pass_time_totals(*a)

    def draft_passes_time_totals(self, *a):
        return self.flat.draft_passes_time_totals(*a)


@pytest.mark.parametrize("serving", ["static_batch", "continuous_refill"])
def test_fixed_step_times_priced_from_totals_equal_per_step_pricing(serving):
    req = point_requests(0.7, output_tokens=50, replications=6, per_replication=8)
    fast = serve(req, 4, serving, FLAT, "ragged", 3, np.random.default_rng(1))
    slow = serve(req, 4, serving, NotFixed(FLAT), "ragged", 3, np.random.default_rng(1))
    for field in dataclasses.fields(fast):
        assert np.allclose(getattr(fast, field.name), getattr(slow, field.name)), field.name


def test_steps_record_who_is_active():
    req = varied(0.6, replications=4, per_replication=9)
    record = simulate_steps(req, 3, "static_batch", "ragged", 4, np.random.default_rng(2))
    steps = record.last_step - record.first_step + 1  # every request is active in between
    for r in range(4):
        first, n = record.rep_first_step[r], record.rep_steps[r]
        # a static batch lasts as long as its longest request; the next starts right after
        assert n == steps[r].reshape(3, 3).max(axis=1).sum()
        active = np.zeros(n, int)
        for a, b in zip(record.first_step[r] - first, record.last_step[r] - first):
            active[a:b + 1] += 1
        assert np.array_equal(active, record.seqs[first:first + n])
    assert np.array_equal(record.rep_slot_steps, steps.sum(axis=1))
    assert np.array_equal(np.add.reduceat(record.tokens, record.rep_first_step),
                          req.output_len_tokens.sum(axis=1))
