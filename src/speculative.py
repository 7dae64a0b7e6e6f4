"""Speculative decoding at batch size B: gamma draft passes, then one target verification.

Per step, for every active sequence (Leviathan et al. 2023; Chen et al. 2023):
1. the draft proposes gamma tokens in gamma sequential one-position passes over the batch;
2. the target verifies gamma + 1 positions per sequence in one pass;
3. the verifier accepts K drafts (src.acceptance: geometric, capped at gamma) and adds one token of
   its own: the correction token at the first rejection, or the bonus token if all gamma passed;
4. the sequence commits K + 1 tokens, capped at the tokens it still needs.

Verification policy decides what "the sequence commits" means in a batch:
* ragged: each sequence keeps its own K + 1 (engines with per-sequence KV-cache lengths:
  vLLM, SGLang, TensorRT-LLM).
* lockstep: every active sequence advances by min over the batch of K, plus one (implementations
  that keep the batch's KV cache rectangular); the weakest-accepting request limits the batch.

Several gammas can run in one call, each on its own copy of the requests (rows stacked on the
replication axis) and its own random stream: the loop then makes one pass over the arrays for all
of them, which is what makes the sweep fast. Each gamma's numbers are exactly those of a run alone.
"""
from __future__ import annotations

import numpy as np

from src.acceptance import accepted_drafts_from_exponentials
from src.costmodel import CostModel
from src.serving import RunStats, StepOutcome, serve, split_rows
from src.workload import Requests, stack_requests


def speculative_decoder(cost: CostModel, gammas: list[int], rngs: list[np.random.Generator],
                        rows_per_gamma: int, verification: str,
                        hazard_profile: np.ndarray | None = None):
    """Decoder for src.serving.serve; rows [i*rows_per_gamma, (i+1)*rows_per_gamma) use gammas[i].
    hazard_profile: the mode's per-position acceptance shape (None: i.i.d.; src/acceptance.py)."""
    lockstep = verification == "lockstep"
    gamma_per_row = np.repeat(np.asarray(gammas, dtype=np.int64), rows_per_gamma)  # [R]
    n_blocks = len(gammas)
    draws = None  # Exp(1) per slot, [B, n_blocks * rows_per_gamma]: gamma i's columns come from rngs[i]
    view = {}  # gamma per working row and the blocks still present, for the current `rows`

    def step(rows, active, n_active, alpha, remaining, context):
        nonlocal draws
        B = active.shape[1]
        if draws is None:
            draws = np.empty((n_blocks, B, rows_per_gamma))
        if view.get("rows") is not rows:
            present = np.unique(rows // rows_per_gamma)
            view.update(rows=rows, gamma=gamma_per_row[rows], blocks=present,
                        whole=rows.size == n_blocks * rows_per_gamma)
        # every block draws a full [B, rows_per_gamma] of Exp(1) per step while any of its rows is
        # present, so a gamma's stream never depends on which other gammas share the arrays
        for i in view["blocks"]:
            rngs[i].standard_exponential(out=draws[i])
        by_slot = draws.transpose(1, 0, 2).reshape(B, -1)  # [B, R] C order = [R, B] F order
        slot_draws = (by_slot if view["whole"] else by_slot[:, rows]).T
        gamma = view["gamma"]
        gamma_col = gamma[:, None]
        accepted = accepted_drafts_from_exponentials(slot_draws, alpha, gamma_col, hazard_profile)
        draft_time = cost.draft_passes_time(active, gamma, context)
        verify_time = cost.target_pass_time(active, gamma + 1, context)
        if lockstep:  # the batch keeps only its shortest accepted prefix
            kept = np.where(active, accepted, gamma_col).min(axis=1, keepdims=True)
        else:
            kept = accepted
        committed = np.minimum(kept + 1, remaining)  # remaining is 0 in inactive slots
        proposed = gamma * n_active
        # share of the draft passes spent on drafts not committed (rejected, dropped by lockstep,
        # or past the request's end): 1 - (committed - 1 per sequence) / proposed
        kept_drafts = committed.sum(axis=1) - n_active
        return StepOutcome(
            committed_tokens=committed,
            accepted_drafts=np.where(active, accepted, 0).sum(axis=1),
            proposed_drafts=proposed,
            draft_time=draft_time,
            verify_time=verify_time,
            rejected_draft_time=draft_time * (1.0 - kept_drafts / np.maximum(proposed, 1)),
        )

    return step


def simulate_speculative(
    requests: Requests, batch_size: int, serving_mode: str, cost: CostModel,
    gammas: list[int], verification: str, rngs: list[np.random.Generator],
) -> list[RunStats]:
    """One RunStats per gamma, each from `requests` with its own random stream rngs[i]."""
    R = requests.shape[0]
    decoder = speculative_decoder(cost, list(gammas), rngs, R, verification, requests.hazard_profile)
    stats = serve(stack_requests([requests] * len(gammas)), batch_size, serving_mode, decoder)
    return split_rows(stats, len(gammas))
