"""The serving loop in step space, compiled: who is in which slot at every decoding step.

Which requests are active at a step, and how many tokens each commits, depend on the acceptance
draws, the lengths and the serving mode, never on how long a step takes: slots are freed and
refilled at step boundaries. So the loop runs without a clock. It records, per step, the totals a
cost model needs (active sequences, their summed context, committed tokens) and, per request, its
first and last step; src/serving.py then prices every step in one vectorised call of the cost
model and adds up the clock. Replications run one after another; their steps are stored back to
back in flat arrays.

Decoders (one per step for every active slot):
* GREEDY: the slot commits 1 token.
* RAGGED: the slot draws its K (accepted drafts) and commits min(K + 1, tokens it still needs).
* LOCKSTEP: every active slot draws its K; all commit min(min over the batch of K + 1, needs).

Draws. The chain study and the tree study run this one loop; only the draw of K differs:
* a chain of gamma drafts (tree_child None): one Exp(1) variate,
  K = src.acceptance.accepted_drafts_from_exponential (i.i.d. or per-position acceptance: the
  request's hazard scale -ln alpha and the mode's hazard profile);
* a token tree of depth gamma (tree_child its child table; src/treesim/loop.py):
  K = src.treeshape.accept.accepted_tree_drafts, a walk of the tree with the request's top-1
  rates by depth a_d = exp(-h dD_d), computed once at admission.
The kind is picked when numba compiles the loop, not per draw: numba prunes an `x is None` branch
on an argument's type (None or omitted vs an array), so each kind gets its own machine code and
the chain's does no tree work. Alternatives measured with numba 0.68: a compiled draw passed in
as a function argument, or a loop made per draw by a factory closing over one, is cached under
the dispatcher's per-process identity, so every process compiles it again; a NamedTuple draw
dispatched by numba.extending.overload, the draw in an inner closure, or in a compiled helper
function made the loop 15-70% slower (chain or tree, simulate_steps on 200 x 64 requests).

Serving modes: STATIC admits the next B queued requests once every slot is empty; CONTINUOUS
refills each freed slot, in slot order, with the next queued request before the next step.

numba compiles this loop (cache=True keeps the machine code in __pycache__, so only the first run
on a machine pays the compile time); design.md, "Speed", gives the measurements behind it.
numba keys a cached function by its own file; src/compiled_cache.py stamps this file's
and the draws' (src/acceptance.py, src/treeshape/accept.py) with one hash of all three, so a
change to a draw recompiles the loop too.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from src import (
    acceptance,
    compiled_cache,  # noqa: F401  (before the first njit: the cache's stamp)
)
from src.treeshape import accept

accepted_drafts_from_exponential = njit(cache=True)(acceptance.accepted_drafts_from_exponential)
accepted_tree_drafts = njit(cache=True)(accept.accepted_tree_drafts)

GREEDY, RAGGED, LOCKSTEP = 0, 1, 2  # src.serving.DECODERS


@njit(cache=True)
def run_steps(rng, decoder, continuous, batch_size, gamma, hazard_profile,
              output_len, prompt_len, hazard_scale, draft_budget, draft_mid_shift, store_steps,
              step_seqs, step_tokens, step_context, step_draft_mid, step_draft_start,
              first_step, last_step, rep_first_step, rep_steps, rep_slot_steps, rep_kept_share,
              accepted, tree_child=None, tree_cum_shares=None):
    """Simulate every replication (row of output_len [R, N]); returns the number of steps.

    The draw: a chain of gamma drafts, hazard_profile D_1..D_gamma (empty: i.i.d.); or, with
    tree_child given, a tree of depth gamma: tree_child[i, j] the rank-j child of node i or -1,
    hazard_profile the tree's hazard steps dD_1..dD_gamma, tree_cum_shares the sibling vector's
    cumulative shares.

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
    slot_scale = np.empty(B)  # hazard scale of each slot's request
    slot_rates = np.empty((B, 0 if tree_child is None else gamma))  # top-1 rates by depth
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
            slot_scale[s] = hazard_scale[r, q]
            if tree_child is not None:  # a_d = exp(-h dD_d)
                for d in range(gamma):
                    slot_rates[s, d] = math.exp(-hazard_scale[r, q] * hazard_profile[d])
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
                    if tree_child is None:  # pruned at compile time (see the module docstring)
                        k = accepted_drafts_from_exponential(
                            rng.standard_exponential(), slot_scale[s], hazard_profile, gamma)
                    else:
                        k = accepted_tree_drafts(rng, tree_child, slot_rates[s], tree_cum_shares)
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
                        if tree_child is None:  # pruned at compile time (see the module docstring)
                            k = accepted_drafts_from_exponential(
                                rng.standard_exponential(), slot_scale[s], hazard_profile, gamma)
                        else:
                            k = accepted_tree_drafts(rng, tree_child, slot_rates[s],
                                                     tree_cum_shares)
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
