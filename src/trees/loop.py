"""The compiled step loop for token trees: src/step_engine.py's loop with the tree draw.

Everything but the draw is step_engine.run_steps line for line (serving modes, ragged and lockstep
verification, per-step records); a chain never comes here (src/trees/serve.py sends it to the
chain loop, so chains keep their numbers bit for bit). Each active slot's verification walks the
grid point's tree (src/trees/accept.py) with its request's top-1 rates by depth, computed once at
admission: a_d = exp(-h dD_d).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from src.step_engine import GREEDY, LOCKSTEP, RAGGED
from src.trees import accept

accepted_tree_drafts = njit(cache=True)(accept.accepted_tree_drafts)

__all__ = ["run_tree_steps", "GREEDY", "RAGGED", "LOCKSTEP"]


@njit(cache=True)
def run_tree_steps(rng, decoder, continuous, batch_size, gamma, child, hazard_steps, cum_shares,
              output_len, prompt_len, hazard_scale, draft_budget, draft_mid_shift, store_steps,
              step_seqs, step_tokens, step_context, step_draft_mid, step_draft_start,
              first_step, last_step, rep_first_step, rep_steps, rep_slot_steps, rep_kept_share,
              accepted):
    """step_engine.run_steps with a token tree: `gamma` is the tree's depth S, each draw walks
    `child` (accept.accepted_tree_drafts) with the slot's top-1 rates by depth.

    Per replication: rep_first_step (flat index of its first step), rep_steps, rep_slot_steps
    (sum over steps of active sequences), rep_kept_share (sum over steps of kept drafts / active
    sequences, kept drafts = committed tokens - active sequences) and accepted drafts. Per
    request: first_step / last_step
    (flat step indices; a request is active at every step in between).
    With store_steps, per step t (flat over replications): step_seqs[t] active sequences,
    step_context[t] their summed context before the step, step_tokens[t] tokens committed; with
    draft_budget >= 0 also step_draft_mid[t] = sum of min(context + draft_mid_shift, budget) and
    step_draft_start[t] = sum of min(context, budget) (a draft KV cache capped at `budget` tokens).
    Capacity: every step commits at least one token, so output_len.sum() steps always fit.
    """
    R, N = output_len.shape
    B = batch_size
    slot_request = np.empty(B, np.int64)
    remaining = np.zeros(B, np.int64)
    context = np.zeros(B, np.int64)
    draws = np.empty(B, np.int64)
    slot_rates = np.empty((B, gamma))  # top-1 rate by depth of each slot's request
    active = np.empty(B, np.int64)  # active slots, in slot order
    t = 0
    for r in range(R):
        rep_first_step[r] = t
        queued = 0
        n_active = 0
        context_sum = 0  # summed context of the active slots
        acc = 0
        slot_steps = 0
        kept_share = 0.0

        def admit(s, q, step):
            slot_request[s] = q
            remaining[s] = output_len[r, q]
            context[s] = prompt_len[r, q]
            for d in range(gamma):
                slot_rates[s, d] = math.exp(-hazard_scale[r, q] * hazard_steps[d])
            first_step[r, q] = step
            return prompt_len[r, q]

        while True:
            if n_active == 0:  # start of the replication, or a static batch has drained
                if queued == N:
                    break
                for s in range(min(B, N - queued)):
                    context_sum += admit(s, queued, t)
                    active[s] = s
                    queued += 1
                    n_active += 1
            if store_steps:
                step_seqs[t] = n_active
                step_context[t] = context_sum
            if store_steps and draft_budget >= 0:
                mid = 0.0
                start = 0.0
                for i in range(n_active):
                    s = active[i]
                    mid += min(context[s] + draft_mid_shift, draft_budget)
                    start += min(context[s], draft_budget)
                step_draft_mid[t] = mid
                step_draft_start[t] = start
            kept = gamma
            if decoder == LOCKSTEP:  # the batch keeps its shortest accepted prefix
                for i in range(n_active):
                    s = active[i]
                    k = accepted_tree_drafts(rng, child, slot_rates[s], cum_shares)
                    draws[s] = k
                    kept = min(kept, k)
            committed_sum = 0
            still = 0  # active slots after this step, compacted in slot order
            for i in range(n_active):
                s = active[i]
                if decoder == GREEDY:
                    c = 1
                else:
                    if decoder == RAGGED:
                        k = accepted_tree_drafts(rng, child, slot_rates[s], cum_shares)
                        c = min(k + 1, remaining[s])
                    else:
                        k = draws[s]
                        c = min(kept + 1, remaining[s])
                    acc += k
                remaining[s] -= c
                context[s] += c
                committed_sum += c
                if remaining[s] > 0:
                    context_sum += c
                    active[still] = s
                    still += 1
                    continue
                q = slot_request[s]
                last_step[r, q] = t
                context_sum -= context[s] - c
                if continuous and queued < N:  # refilled before the next step
                    context_sum += admit(s, queued, t + 1)
                    queued += 1
                    active[still] = s
                    still += 1
            slot_steps += n_active
            kept_share += (committed_sum - n_active) / n_active
            if store_steps:
                step_tokens[t] = committed_sum
            n_active = still
            t += 1
        rep_steps[r] = t - rep_first_step[r]
        rep_slot_steps[r] = slot_steps
        rep_kept_share[r] = kept_share
        accepted[r] = acc
    return t
