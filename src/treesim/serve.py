"""Serving with a token tree: the tree of a (quality mode, shape), the compiled loop, the pricing.

The tree a grid point verifies is selected once per quality mode (select.sglang_tree) from the
mode's median request's top-1 rates and the sibling vector: SGLang re-selects it every step from
the draft's confidences, which the acceptance model does not carry (design.md, "Token trees").
Each request then walks that tree with its own rates. A chain shape (K = 1) goes to the chain
path (src/serving.serve with gamma = S), so its numbers are the chain study's, bit for bit.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from src.serving import DECODERS, RunStats, StepBuffers, StepRecord, price_steps, serve
from src.treeshape.accept import hazard_steps
from src.treeshape.select import sglang_tree
from src.treeshape.shape import TreeShape
from src.treeshape.siblings import SiblingVector, child_probabilities
from src.treeshape.tree import Tree
from src.treesim.costs import TreeCost
from src.workload import Requests


def representative_rates(alpha: float, profile: np.ndarray | None, depth: int) -> np.ndarray:
    """Top-1 rates a_1..a_depth of a request with representative rate alpha."""
    return np.exp(np.log(alpha) * hazard_steps(profile, depth))


def mode_tree(shape: TreeShape, alpha: float, profile: np.ndarray | None,
              siblings: SiblingVector) -> Tree:
    """The SGLang tree for `shape` under a request of representative rate alpha."""
    q = child_probabilities(representative_rates(alpha, profile, shape.steps), siblings.shares,
                            shape.topk)
    return sglang_tree(shape, q)


def simulate_tree_steps(requests: Requests, batch_size: int, serving_mode: str, decoder: str,
                        tree: Tree, siblings: SiblingVector, rng: np.random.Generator,
                        store_steps: bool = True,
                        draft_budget_tokens: int | None = None) -> StepRecord:
    """src/serving.simulate_steps for a tree (src/treesim/loop.py)."""
    from src.treesim import loop  # numba: only when something is simulated
    output_len = np.ascontiguousarray(requests.output_len_tokens, dtype=np.int64)
    prompt_len = np.ascontiguousarray(requests.prompt_len_tokens, dtype=np.int64)
    hazard_scale = -np.log(np.ascontiguousarray(requests.alpha, dtype=np.float64))
    depth = tree.max_depth
    steps = np.ascontiguousarray(hazard_steps(requests.hazard_profile, depth))
    cum_shares = np.ascontiguousarray(np.cumsum(siblings.shares))
    child = np.ascontiguousarray(tree.child_table())
    buf = StepBuffers.allocate(output_len, store_steps, draft_budget_tokens)
    T = loop.run_tree_steps(
        rng, DECODERS.index(decoder), serving_mode == "continuous_refill", batch_size, depth,
        child, steps, cum_shares, output_len, prompt_len, hazard_scale, buf.budget,
        (depth - 1) * 0.5, store_steps, *buf.loop_arrays())
    return buf.record(T, store_steps)


def serve_tree(requests: Requests, batch_size: int, serving_mode: str, cost, decoder: str,
               shape: TreeShape, tree: Tree | None, siblings: SiblingVector,
               rng: np.random.Generator) -> RunStats:
    """One serving run with `shape` (decoder ragged or lockstep). A chain shape runs the chain
    path; a tree walks `tree` (its depth <= S). Proposed drafts are N - 1 per sequence and step;
    a step's rejected draft time is its draft time x (1 - accepted depth / S)."""
    if shape.is_chain:
        return serve(requests, batch_size, serving_mode, cost, decoder, shape.steps, rng)
    tree_cost = TreeCost(cost, shape)
    record = simulate_tree_steps(
        requests, batch_size, serving_mode, decoder, tree, siblings, rng,
        store_steps=tree_cost.fixed_pass_times is None,
        draft_budget_tokens=getattr(cost, "draft_kv_budget_tokens", None))
    stats = price_steps(record, requests, tree_cost, shape.steps)
    return replace(stats, proposed_drafts=shape.drafts * record.rep_slot_steps.astype(float))
