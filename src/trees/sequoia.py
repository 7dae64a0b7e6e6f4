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

import numpy as np

from src.trees.tree import Tree, from_parents


def sequoia_tree(tokens: int, q: np.ndarray, max_depth: int | None = None) -> tuple[Tree, float]:
    """(best tree of `tokens` nodes, its expected tokens per verification) for child
    probabilities q[d - 1, j] (d = 1..max_depth rows needed, j = 0..K-1 ranks)."""
    N = tokens
    D = N - 1 if max_depth is None else min(max_depth, N - 1)
    if q.shape[0] < D:
        raise ValueError(f"q needs {D} depth rows, has {q.shape[0]}")
    K = q.shape[1]
    neg = -np.inf
    T = np.full((D + 2, N + 1), neg)  # T[d, n]
    T[:, 1] = 1.0
    choice = np.zeros((D + 1, K, N), dtype=np.int64)  # best t for (d, j, m)
    for d in range(D - 1, -1, -1):
        sub = T[d + 1]
        G_next = np.full(N, neg)
        G_next[0] = 0.0
        for j in range(K - 1, -1, -1):
            G = np.full(N, neg)
            G[0] = 0.0
            for m in range(1, N):
                t = np.arange(1, m + 1)
                sub_t = sub[t]
                cand = np.where(sub_t > neg, q[d, j] * np.where(sub_t > neg, sub_t, 0.0), neg)
                cand = cand + G_next[m - t]
                best = int(np.argmax(cand))
                G[m], choice[d, j, m] = cand[best], best + 1
            G_next = G
        T[d, 2:] = 1.0 + G_next[1:N]
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
