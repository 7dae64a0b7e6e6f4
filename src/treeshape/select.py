"""Which nodes SGLang's EAGLE worker verifies for a shape (S, K, N): beam, then rerank.

sgl-project/sglang python/sglang/srt/speculative/spec_utils.py, select_top_k_tokens: draft pass 1
proposes the root's top-K children (score = draft probability); each later pass expands each of
the K kept nodes into its top-K children, scores them by cumulative probability (parent score x
child probability) and keeps the best K of the K^2. build_eagle_tree.py then takes the best N - 1
of all K + (S - 1) K^2 proposed nodes by cumulative score (EAGLE-2's rerank, Li et al. 2024,
arXiv 2406.16858), sorted back into proposal order, plus the root.

Under the acceptance model the draft's cumulative confidence is replaced by the node's path
acceptance probability (EAGLE-2, section 3: the draft's confidence approximates the acceptance
rate well). A child's value is its parent's times a probability <= 1, so the top N - 1 is always
closed under ancestors (ties go to the earlier-proposed node, which a parent always is).
"""
from __future__ import annotations

import numpy as np

from src.treeshape.shape import TreeShape
from src.treeshape.tree import Tree, from_parents


def sglang_tree(shape: TreeShape, q: np.ndarray) -> Tree:
    """The tree SGLang verifies for `shape` when child probabilities are q[d - 1, j]
    (siblings.child_probabilities, depth d = 1..S, rank j = 0..K-1)."""
    S, K, N = shape.steps, shape.topk, shape.tokens
    if q.shape[1] < K:  # ranks past the sibling vector are never accepted
        q = np.pad(q, ((0, 0), (0, K - q.shape[1])))
    parent, rank, depth, value = [], [], [], []  # the proposal pool, in proposal order

    def propose(p, j, d, v):
        parent.append(p)
        rank.append(j)
        depth.append(d)
        value.append(v)
        return len(value) - 1

    beam = [propose(-1, j, 1, q[0, j]) for j in range(K)]  # pass 1: the root's top-K children
    for d in range(2, S + 1):
        proposed = [propose(b, j, d, value[b] * q[d - 1, j]) for b in beam for j in range(K)]
        # the best K by cumulative value; stable, so ties keep proposal order (as topk would)
        order = sorted(proposed, key=lambda i: -value[i])
        beam = order[:K]
    chosen = sorted(sorted(range(len(value)), key=lambda i: -value[i])[:N - 1])
    new_index = {-1: 0, **{c: i + 1 for i, c in enumerate(chosen)}}
    return from_parents([-1] + [new_index[parent[c]] for c in chosen],
                        [-1] + [rank[c] for c in chosen])
