"""Token trees in the serving engine (`python run.py serve --policies tree:S:K:N`).

* The tree: SGLang's selection (select.py) for the median request of the rows' quality mode
  (i.i.d. top-1 rate alpha, or the mode's per-position rates), fixed for the run.
* Each step's accepted depth: one counter-based uniform per request and step (the engine's own
  draw, src/online/counter_rng.py) against the request's survival by depth, P(K >= d) (depth.py).
* Step times: TreeStepTimer prices a speculative step as the tree's verification of N tokens and
  its S draft passes (costs.py) on the deployment's cost model; plain decode steps and prefill
  chunks as the chain deployment's timer does (the chunks' mixed pass is priced at S + 1
  positions, not N: an approximation while prompts are being prefilled).
* Where it runs: both engines; the compiled loop (src/online/engine_loop.py) reads the same
  thresholds (row_thresholds) and prices the step from step_prices' tables plus
  TreeStepTimer.tree_verify_extra_ms.
* Not modelled: the engine reserves KV slots and token budget for S + 1 positions per decoding
  sequence, not N (the tree's rejected branches are freed within the step in SGLang too, but the
  verification pass holds N slots while it runs).
"""
from __future__ import annotations

import numpy as np

from src.costmodel.presets import CostModelInputError
from src.trees.accept import hazard_steps
from src.trees.costs import draft_ms, verify_ms
from src.trees.depth import survival_rates
from src.trees.serve import mode_tree
from src.trees.siblings import SiblingVector


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
    """(tree_row bool [R], P(K >= d) [R, N, depth] zero-padded past each tree's depth, or None
    without a tree policy) of the engine's row groups: both engines draw from these."""
    tree_row = np.zeros(R, bool)
    trees = [g for g in groups if getattr(g.policy, "shape", None) is not None]
    if not trees:
        return tree_row, None
    thr = [tree_thresholds(g.policy.shape, requests.alpha[g.rows], requests.hazard_profile)
           for g in trees]
    out = np.zeros((R, N, max(t.shape[2] for t in thr)))
    for g, t in zip(trees, thr):
        out[g.rows, :, :t.shape[2]] = t
        tree_row[g.rows] = True
    return tree_row, out


def accepted_depth(u: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """K per draw: #{d : u < P(K >= d)} (thresholds [n, depth] for the n draws)."""
    return (u[:, None] < thresholds).sum(axis=1)
