"""Token trees in the serving engine (`python run.py serve --policies tree:S:K:N`).

* The tree: SGLang's selection (select.py) for the median request of the rows' quality mode
  (i.i.d. top-1 rate alpha, or the mode's per-position rates), fixed for the run.
* Each step's accepted depth: one counter-based uniform per request and step (the engine's own
  draw, src/online/counter_rng.py) against the request's survival by depth, P(K >= d) (depth.py).
* Step times: TreeStepTimer prices a speculative step as the tree's verification of N tokens and
  its S draft passes (costs.py) on the deployment's cost model; plain decode steps and prefill
  chunks as the chain deployment's timer does (the chunks' mixed pass is priced at S + 1
  positions, not N: an approximation while prompts are being prefilled).
* Where it runs: the numpy engine (FixedTree.reads_slot_state keeps the compiled loop away; a run
  with a tree policy runs all its policies on numpy).
* Not modelled: the engine reserves KV slots and token budget for S + 1 positions per decoding
  sequence, not N (the tree's rejected branches are freed within the step in SGLang too, but the
  verification pass holds N slots while it runs).
"""
from __future__ import annotations

import numpy as np

from src.trees.accept import hazard_steps
from src.trees.costs import draft_ms, verify_ms
from src.trees.depth import survival_rates
from src.trees.serve import mode_tree
from src.trees.siblings import SiblingVector


def tree_timer(timer, shape):
    """A StepTimer whose speculative steps are the tree's (module docstring)."""
    base = type(timer)

    class TreeStepTimer(base):
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


def accepted_depth(u: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """K per draw: #{d : u < P(K >= d)} (thresholds [n, depth] for the n draws)."""
    return (u[:, None] < thresholds).sum(axis=1)
