"""The cost-model protocol the engine asks for step times, and the flat reference model.

The engine (src/serving.py) never computes a time itself; it asks a cost model, through the
methods of `CostModel`, for the time of

* one target pass over `positions_per_seq` positions of every active sequence
  (greedy decode: 1 position; verification of gamma drafts: gamma + 1 positions), and
* `gamma` sequential one-position draft passes over the same sequences.

Both are vectorised over independent replications: `active` is a bool array [R, B] (replication,
slot), `context_len_tokens` an int array [R, B] of each slot's current context (prompt plus tokens
generated so far; meaningless where the slot is inactive), and the result is a float array [R] of
times, one per replication. A replication with no active sequence gets time 0. `positions_per_seq`
and `gamma` are an int or an int array [R] (one value per replication: the sweep runs several
gammas side by side as blocks of rows), so implementations must broadcast them.

`FlatCostModel` is the reference study's idealisation (Leviathan et al. 2023, section 3.4): a target
pass costs 1 time unit whatever the batch and however many positions it verifies; a draft pass costs
c target passes. A hardware-aware model (HardwareCostModel, src/costmodel/hardware.py) plugs in by
implementing the same two methods.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class CostModel(Protocol):
    """What the engine needs of a step-time model. See the module docstring for shapes."""

    time_unit: str  # unit of the returned times, e.g. "target_pass" or "ms"

    def target_pass_time(
        self, active: np.ndarray, positions_per_seq: int, context_len_tokens: np.ndarray
    ) -> np.ndarray: ...

    def draft_passes_time(
        self, active: np.ndarray, gamma: int, context_len_tokens: np.ndarray
    ) -> np.ndarray: ...

    # The same times from per-pass totals: the engine (src/serving.py) prices every simulated step
    # in one call, with n_seqs[T] active sequences and sum_context_tokens[T] their summed context
    # (plus, for a draft KV cache capped at b tokens, sum min(ctx + (gamma - 1) / 2, b) and
    # sum min(ctx, b)). A model whose step times never vary may instead offer
    # fixed_pass_times(gamma) -> (target pass, gamma draft passes).
    def target_pass_time_totals(
        self, n_seqs: np.ndarray, sum_context_tokens: np.ndarray, positions_per_seq: int,
        draft_mid_context: np.ndarray | None = None, draft_start_context: np.ndarray | None = None,
    ) -> np.ndarray: ...

    def draft_passes_time_totals(
        self, n_seqs: np.ndarray, sum_context_tokens: np.ndarray, gamma: int,
        draft_mid_context: np.ndarray | None = None, draft_start_context: np.ndarray | None = None,
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class FlatCostModel:
    """Batch- and length-independent step costs (the seed study's idealisation).

    target pass = 1 time unit; draft pass = draft_cost_ratio time units, so a speculative step costs
    1 + gamma * c and the batch-1 walltime improvement is (1 - a^(g+1)) / ((1 - a)(g c + 1))
    (Leviathan et al. 2023, Theorem 3.8). Holds while every pass is memory-bound and the fixed
    per-step costs dominate; design.md ("Cost model") says where it breaks.
    """

    draft_cost_ratio: float = 0.2  # c: one draft pass / one target pass (seed study default)
    time_unit: str = "target_pass"

    def target_pass_time(self, active, positions_per_seq, context_len_tokens):
        return active.any(axis=1).astype(np.float64)

    def draft_passes_time(self, active, gamma, context_len_tokens):
        return active.any(axis=1) * (gamma * self.draft_cost_ratio)

    def fixed_pass_times(self, gamma: int) -> tuple[float, float]:
        """(target pass, gamma draft passes): the same at every step with an active sequence."""
        return 1.0, gamma * self.draft_cost_ratio

    def target_pass_time_totals(self, n_seqs, sum_context_tokens, positions_per_seq,
                                draft_mid_context=None, draft_start_context=None):
        return (np.asarray(n_seqs) > 0).astype(np.float64)

    def draft_passes_time_totals(self, n_seqs, sum_context_tokens, gamma, draft_mid_context=None,
                                 draft_start_context=None):
        return (np.asarray(n_seqs) > 0) * (gamma * self.draft_cost_ratio)
