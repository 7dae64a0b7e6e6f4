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

Draws: the loop's `draw` argument, whose type picks the draw when numba compiles the loop (one
machine code per kind, no branch per draw). The chain study and the tree study run this one loop.
* ChainDraw, a chain of gamma drafts: one Exp(1) variate per draw,
  K = src.acceptance.accepted_drafts_from_exponential (i.i.d. or per-position acceptance: the
  request's hazard scale -ln alpha and the mode's hazard profile).
* TreeDraw, a token tree of depth gamma: K = src.trees.accept.accepted_tree_drafts, a walk of the
  tree with the request's top-1 rates by depth a_d = exp(-h dD_d), computed once at admission.
Each slot keeps its request's draw state in a row of `slot_state` (admit_slot: the chain its
hazard scale h, a tree its rates by depth).

Serving modes: STATIC admits the next B queued requests once every slot is empty; CONTINUOUS
refills each freed slot, in slot order, with the next queued request before the next step.

numba compiles this loop (cache=True keeps the machine code in __pycache__, so only the first run
on a machine pays the compile time); design.md, "Speed", gives the measurements behind it. numba
keys a cached function by its own file only, so both draws' adapters live here: a change to one
recompiles the loop. A change to the draw functions themselves (src/acceptance.py,
src/trees/accept.py) does not: clear __pycache__ after one. The draw is a NamedTuple whose type
numba dispatches on (numba.extending.overload), not a compiled function passed in: a dispatcher
argument, or a loop made per draw by a factory closing over one, is keyed by the dispatcher's
per-process identity, so every process would compile the loop again (measured with numba 0.68).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numba.extending import overload

from src import acceptance
from src.trees import accept

accepted_drafts_from_exponential = njit(cache=True)(acceptance.accepted_drafts_from_exponential)
accepted_tree_drafts = njit(cache=True)(accept.accepted_tree_drafts)

GREEDY, RAGGED, LOCKSTEP = 0, 1, 2  # src.serving.DECODERS


class ChainDraw(NamedTuple):
    """K = #{i <= gamma : D_i <= E / h}, E ~ Exp(1), h the request's hazard scale."""
    hazard_profile: np.ndarray  # D_1..D_gamma; empty for i.i.d. acceptance (D_i = i)


class TreeDraw(NamedTuple):
    """K = the depth accept.accepted_tree_drafts's walk of the tree reaches."""
    child: np.ndarray  # [nodes, width]: rank-j child of node i, or -1
    hazard_steps: np.ndarray  # dD_1..dD_depth
    cum_shares: np.ndarray  # r_2, r_2 + r_3, ...: the sibling vector's cumulative shares


def _admit_chain(draw, slot_state, s, hazard_scale):
    slot_state[s, 0] = hazard_scale


def _admit_tree(draw, slot_state, s, hazard_scale):
    for d in range(draw.hazard_steps.size):
        slot_state[s, d] = math.exp(-hazard_scale * draw.hazard_steps[d])


def _accepted_chain(rng, draw, slot_state, s, gamma):
    return accepted_drafts_from_exponential(
        rng.standard_exponential(), slot_state[s, 0], draw.hazard_profile, gamma)


def _accepted_tree(rng, draw, slot_state, s, gamma):
    return accepted_tree_drafts(rng, draw.child, slot_state[s], draw.cum_shares)


_ADMIT = {ChainDraw: _admit_chain, TreeDraw: _admit_tree}
_ACCEPTED = {ChainDraw: _accepted_chain, TreeDraw: _accepted_tree}


def admit_slot(draw, slot_state, s, hazard_scale):
    """Fill row s of slot_state with the draw state of a request of hazard scale -ln alpha."""
    _ADMIT[type(draw)](draw, slot_state, s, hazard_scale)


def accepted_drafts(rng, draw, slot_state, s, gamma):
    """One verification's accepted drafts K <= gamma for the request in slot s."""
    return _ACCEPTED[type(draw)](rng, draw, slot_state, s, gamma)


def _for_kind(table, draw):
    """The implementation in `table` for draw's numba type (None: numba reports no match)."""
    return table.get(getattr(draw, "instance_class", None))


@overload(admit_slot)
def _admit_slot_compiled(draw, slot_state, s, hazard_scale):
    return _for_kind(_ADMIT, draw)


@overload(accepted_drafts)
def _accepted_drafts_compiled(rng, draw, slot_state, s, gamma):
    return _for_kind(_ACCEPTED, draw)


def run_steps(rng, decoder, continuous, batch_size, gamma, hazard_profile, *arrays):
    """run_draw_steps with a chain (hazard_profile: D_1..D_gamma, empty for i.i.d.); `arrays` are
    run_draw_steps's arguments from output_len on."""
    return run_draw_steps(rng, ChainDraw(hazard_profile), decoder, continuous, batch_size, gamma,
                          *arrays)


@njit(cache=True)
def run_draw_steps(rng, draw, decoder, continuous, batch_size, gamma,
                   output_len, prompt_len, hazard_scale, draft_budget, draft_mid_shift,
                   store_steps, step_seqs, step_tokens, step_context, step_draft_mid,
                   step_draft_start, first_step, last_step, rep_first_step, rep_steps,
                   rep_slot_steps, rep_kept_share, accepted):
    """Simulate every replication (row of output_len [R, N]); returns the number of steps.
    `draw` (ChainDraw or TreeDraw) gives each verification's K <= gamma (a tree's gamma: its depth).

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
    slot_state = np.empty((B, max(gamma, 1)))  # each slot's draw state (admit_slot)
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
            admit_slot(draw, slot_state, s, hazard_scale[r, q])
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
                    k = accepted_drafts(rng, draw, slot_state, s, gamma)
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
                        k = accepted_drafts(rng, draw, slot_state, s, gamma)
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
