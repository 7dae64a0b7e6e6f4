"""Token trees in the serving engine (`python run.py serve --policies tree:S:K:N`).

* The tree: SGLang's selection (select.py) for the median request of the rows' quality mode
  (i.i.d. top-1 rate alpha, or the mode's per-position rates), fixed for the run.
* Each step's accepted depth: one counter-based uniform per request and step (the engine's own
  draw, src/online/counter_rng.py) against the request's survival by depth, P(K >= d) (depth.py).
* Step times: TreeStepTimer prices a speculative step as the tree's verification of N tokens and
  its S draft passes (costs.py) on the deployment's cost model; plain decode steps as the chain
  deployment's timer does, prefill chunks in a mixed pass with N positions per decoding
  sequence.
* Scheduling (both engines): a tree step's decoding sequence takes N positions of token budget
  and N KV slots and proposes N - 1 drafts; where N positions per sequence exceed the budget,
  the step verifies no tree (gamma 0).
* Where it runs: both engines; the compiled loop (src/online/engine_loop.py) reads the same
  thresholds (row_thresholds) and prices the step from step_prices' tables plus
  TreeStepTimer.tree_verify_extra_ms.
"""
from __future__ import annotations

import numpy as np

from src.costmodel.presets import CostModelInputError
from src.treeshape.accept import hazard_steps
from src.treeshape.depth import survival_rates
from src.treeshape.siblings import SiblingVector
from src.treesim.costs import draft_ms, verify_ms
from src.treesim.serve import mode_tree


def tree_timer(timer, shape):
    """A StepTimer whose speculative steps are the tree's (module docstring)."""
    base = type(timer)

    class TreeStepTimer(base):
        tree_shape = shape  # the compiled engine prices it (src/online/step_prices.py)

        def tree_verify_extra_ms(self, max_seqs: int) -> np.ndarray:
            """What verify_ms adds to the target pass of N positions, by sequences 0..max_seqs
            [max_seqs + 1] (it depends on the sequences only; NaN where N positions of that
            many sequences do not fit the GPU: a step the memory check refuses)."""
            out = np.full(max_seqs + 1, np.nan)
            fit = self.cost.largest_batch_that_fits(shape.tokens, max_seqs)
            while fit >= 0:
                n = np.arange(fit + 1)
                zero = np.zeros(n.size)
                try:
                    out[:fit + 1] = verify_ms(self.cost, shape, n, zero) - np.asarray(
                        self.cost.target_pass_time_totals(n, zero, shape.tokens), dtype=float)
                    break
                except CostModelInputError:  # within rounding of the memory bound
                    fit -= 1
            return out

        def prefill_extra_ms(self, n_decode, gamma, *chunks):
            """The chunks' share of a step, a speculative step's decode part being N positions
            per sequence (the verification's), not gamma + 1."""
            g = np.where(np.asarray(gamma) > 0, shape.tokens - 1, gamma)
            return base.prefill_extra_ms(self, n_decode, g, *chunks)

        def decode_ms_totals(self, n_decode, decode_context_sum, gamma, max_seqs: int,
                             decoding=None, context=None, check_fits: bool = True):
            target, draft = base.decode_ms_totals(self, n_decode, decode_context_sum, gamma,
                                                  max_seqs, decoding, context, check_fits)
            spec = np.asarray(gamma) > 0
            if spec.any():
                n, ctx = np.asarray(n_decode), np.asarray(decode_context_sum)
                target = np.where(spec, verify_ms(self.cost, shape, n, ctx), target)
                draft = np.where(spec, draft_ms(self.cost, shape, n, ctx), draft)
            return target, draft

    out = TreeStepTimer(timer.cost, timer.speculative)
    return out


def tree_thresholds(shape, alpha: np.ndarray, profile: np.ndarray | None,
                    siblings: SiblingVector = SiblingVector()) -> np.ndarray:
    """P(K >= d) per request: [rows, N, depth] for alpha [rows, N] (NaN-padded rows allowed)."""
    finite = alpha[np.isfinite(alpha)]
    tree = mode_tree(shape, float(np.median(finite)), profile, siblings)
    a = np.where(np.isfinite(alpha), alpha, 0.5).ravel()
    rates = a[:, None] ** hazard_steps(profile, tree.max_depth)[None, :]  # a_d = alpha^(dD_d)
    return survival_rates(tree, siblings, rates).reshape(*alpha.shape, tree.max_depth)


def row_thresholds(groups, requests, R: int, N: int):
    """(tree_tokens int [R]: the N of a tree row's tree, 0 for other rows; P(K >= d) [R, N,
    depth] zero-padded past each tree's depth, or None without a tree policy) of the engine's row
    groups: both engines schedule and draw from these."""
    tree_tokens = np.zeros(R, np.int64)
    trees = [g for g in groups if getattr(g.policy, "shape", None) is not None]
    if not trees:
        return tree_tokens, None
    thr = [tree_thresholds(g.policy.shape, requests.alpha[g.rows], requests.hazard_profile)
           for g in trees]
    out = np.zeros((R, N, max(t.shape[2] for t in thr)))
    for g, t in zip(trees, thr):
        out[g.rows, :, :t.shape[2]] = t
        tree_tokens[g.rows] = g.policy.shape.tokens
    return tree_tokens, out


def accepted_depth(u: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """K per draw: #{d : u < P(K >= d)} (thresholds [n, depth] for the n draws)."""
    return (u[:, None] < thresholds).sum(axis=1)
