"""Sequoia's optimal tree for a budget of N verified tokens (arXiv 2402.12374, Algorithm 1).

Under the positional acceptance model the expected tokens a tree commits is the sum over its nodes
of the path acceptance probability (root 1), so the best tree of n nodes is found by dynamic
programming over subtree sizes. With depth-dependent top-1 rates (this project's modes) the
recursion carries the depth d of the subtree's root:

    T(1, d) = 1,   T(n, d) = 1 + G_0(n - 1, d)
    G_j(0, d) = 0,  G_j(m, d) = max_{1 <= t <= m} q(d + 1, j) T(t, d + 1) + G_{j+1}(m - t, d)

where G_j(m, d) is the best value of m nodes placed under ranks j, j + 1, ... of a node at depth d
and q(d, j) the probability that the rank-j child of an accepted depth-(d - 1) node is accepted
(siblings.child_probabilities). Children take ranks in order (a lower rank is never less likely).
The tree's depth is capped at max_depth (default N - 1, i.e. no cap).
"""
from __future__ import annotations

import functools

import numpy as np

from src.treeshape.tree import Tree, from_parents


def sequoia_tree(tokens: int, q: np.ndarray, max_depth: int | None = None) -> tuple[Tree, float]:
    """(best tree of `tokens` nodes, its expected tokens per verification) for child
    probabilities q[d - 1, j] (d = 1..max_depth rows needed, j = 0..K-1 ranks)."""
    N = tokens
    D = N - 1 if max_depth is None else min(max_depth, N - 1)
    if q.shape[0] < D:
        raise ValueError(f"q needs {D} depth rows, has {q.shape[0]}")
    T, choice = _tables(np.ascontiguousarray(q[:max(D, 1)], dtype=np.float64), N, D)
    parent, rank = [-1], [-1]

    def build(node: int, n: int, d: int):
        m, j = n - 1, 0
        while m > 0:
            t = int(choice[d, j, m])
            parent.append(node)
            rank.append(j)
            build(len(parent) - 1, t, d + 1)
            m -= t
            j += 1

    build(0, N, 0)
    tree = _bfs(from_parents(parent, rank))
    return tree, float(T[0, N])


def _tables_py(q, N, D):
    """T[d, n] (best subtree value of n nodes rooted at depth d) and choice[d, j, m] (the best
    size of the rank-j child's subtree when m nodes remain for ranks j, j + 1, ...); the
    recursion of the module docstring, in scalar loops numba compiles."""
    K = q.shape[1]
    neg = -np.inf
    T = np.full((D + 2, N + 1), neg)
    T[:, 1] = 1.0
    choice = np.zeros((D + 1, K, N), dtype=np.int64)
    G_next = np.empty(N)
    G = np.empty(N)
    for d in range(D - 1, -1, -1):
        for m in range(N):
            G_next[m] = 0.0 if m == 0 else neg
        for j in range(K - 1, -1, -1):
            G[0] = 0.0
            for m in range(1, N):
                best, arg = neg, 0
                for t in range(1, m + 1):
                    sub = T[d + 1, t]
                    rest = G_next[m - t]
                    if sub == neg or rest == neg:
                        continue
                    cand = q[d, j] * sub + rest
                    if cand > best:
                        best, arg = cand, t
                G[m] = best
                choice[d, j, m] = arg
            for m in range(N):
                G_next[m] = G[m]
        for n in range(2, N + 1):
            T[d, n] = 1.0 + G_next[n - 1]
    return T, choice


def _tables(q, N, D):
    return _compiled()(q, N, D)


@functools.cache
def _compiled():
    """_tables_py compiled by numba at the first call (cache=True keeps the machine code)."""
    from numba import njit
    return njit(cache=True)(_tables_py)


def _bfs(tree: Tree) -> Tree:
    """The same tree renumbered breadth-first (parents before children, siblings by rank)."""
    order = sorted(range(tree.size), key=lambda i: (tree.depth[i], _path(tree, i)))
    new = {old: i for i, old in enumerate(order)}
    return from_parents([-1] + [new[int(tree.parent[o])] for o in order[1:]],
                        [-1] + [int(tree.rank[o]) for o in order[1:]])


def _path(tree: Tree, i: int) -> tuple:
    ranks = []
    while i > 0:
        ranks.append(int(tree.rank[i]))
        i = int(tree.parent[i])
    return tuple(reversed(ranks))
