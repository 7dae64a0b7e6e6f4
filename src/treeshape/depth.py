"""The accepted depth of a tree verification as one draw: its survival function by depth.

Distinct nodes at the same depth are accepted exclusively (at most one child of an accepted node
is the target's token), so P(K >= d) = sum over the tree's nodes at depth d of their path
acceptance probability, and K = #{d >= 1 : U < P(K >= d)} for one U ~ U(0, 1) has exactly the law
of the walk in accept.py (the committed count is all a step needs). This is the form an engine
that draws one counter-based uniform per request and step can use (src/online).

With i.i.d. top-1 rate alpha, a node's path probability is alpha^(c1) (1 - alpha)^(cs) R, where
c1 counts the rank-1 edges on its path, cs the sibling edges and R the product of their shares
r_k (siblings.py): node_terms gives (c1, cs, R) once per tree, survival() evaluates it for any
alphas.
"""
from __future__ import annotations

import numpy as np

from src.treeshape.siblings import SiblingVector
from src.treeshape.tree import Tree


def node_terms(tree: Tree, siblings: SiblingVector) -> tuple[np.ndarray, ...]:
    """(depth, c1, cs, R) per non-root node."""
    shares = siblings.shares
    c1 = np.zeros(tree.size, np.int64)
    cs = np.zeros(tree.size, np.int64)
    R = np.ones(tree.size)
    for i in range(1, tree.size):
        p, j = tree.parent[i], tree.rank[i]
        c1[i], cs[i], R[i] = c1[p] + (j == 0), cs[p] + (j > 0), R[p]
        if j > 0:
            R[i] *= shares[j - 1] if j - 1 < shares.size else 0.0
    return tree.depth[1:], c1[1:], cs[1:], R[1:]


def survival(tree: Tree, siblings: SiblingVector, alpha) -> np.ndarray:
    """P(K >= d) for d = 1..depth, one row per alpha (i.i.d. top-1 rates): [len(alpha), depth]."""
    depth, c1, cs, R = node_terms(tree, siblings)
    a = np.asarray(alpha, dtype=float).reshape(-1, 1)
    values = a ** c1 * (1.0 - a) ** cs * R  # [A, nodes]
    out = np.zeros((a.shape[0], tree.max_depth))
    for d in range(1, tree.max_depth + 1):
        out[:, d - 1] = values[:, depth == d].sum(axis=1)
    return out


def survival_rates(tree: Tree, siblings: SiblingVector, rates: np.ndarray) -> np.ndarray:
    """P(K >= d), d = 1..depth, for top-1 rates by depth rates[A, depth] (a request per row):
    a node's value is its parent's times a_d (rank 1) or (1 - a_d) r_k (rank k)."""
    a = np.asarray(rates, dtype=float)
    shares = siblings.shares
    values = np.ones((a.shape[0], tree.size))
    out = np.zeros((a.shape[0], tree.max_depth))
    for i in range(1, tree.size):
        d, j = tree.depth[i], tree.rank[i]
        q = a[:, d - 1] if j == 0 else (1.0 - a[:, d - 1]) * (
            shares[j - 1] if j - 1 < shares.size else 0.0)
        values[:, i] = values[:, tree.parent[i]] * q
        out[:, d - 1] += values[:, i]
    return out


def accepted_from_uniform(u, surv: np.ndarray) -> np.ndarray:
    """K = #{d : u < P(K >= d)} per row (u: one uniform per row of surv)."""
    return (np.asarray(u, dtype=float).reshape(-1, 1) < surv).sum(axis=1)
