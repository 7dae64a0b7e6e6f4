"""A token tree as arrays: node 0 is the root (the sequence's last committed token).

parent[i] (-1 for the root), rank[i] (0-based rank among its parent's children; -1 for the root),
depth[i] (root 0). `child_table` is what the step loop walks: child[i, j] = the node of rank j
under node i, or -1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tree:
    parent: np.ndarray  # int64 [N]
    rank: np.ndarray  # int64 [N]
    depth: np.ndarray  # int64 [N]

    @property
    def size(self) -> int:
        return int(self.parent.size)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    @property
    def max_children(self) -> int:
        return int(self.rank.max()) + 1 if self.size > 1 else 0

    def child_table(self, width: int | None = None) -> np.ndarray:
        width = max(self.max_children, 1) if width is None else width
        table = np.full((self.size, width), -1, dtype=np.int64)
        for i in range(1, self.size):
            table[self.parent[i], self.rank[i]] = i
        return table

    def is_chain(self) -> bool:
        return bool(np.all(self.rank[1:] == 0)) and bool(np.all(self.parent[1:] ==
                                                                 np.arange(self.size - 1)))


def from_parents(parent, rank) -> Tree:
    """Tree from parent and rank lists (parents listed before their children)."""
    parent = np.asarray(parent, dtype=np.int64)
    rank = np.asarray(rank, dtype=np.int64)
    depth = np.zeros(parent.size, dtype=np.int64)
    for i in range(1, parent.size):
        if not 0 <= parent[i] < i:
            raise ValueError("a node's parent must come before it")
        depth[i] = depth[parent[i]] + 1
    return Tree(parent, rank, depth)


def chain_tree(gamma: int) -> Tree:
    """The chain of gamma drafts as a tree of gamma + 1 nodes."""
    return from_parents(np.arange(-1, gamma), np.r_[-1, np.zeros(gamma, dtype=np.int64)])


def node_values(tree: Tree, q: np.ndarray) -> np.ndarray:
    """Path acceptance probability of every node: value[0] = 1, value[i] = value[parent] x
    q[depth_i - 1, rank_i] (q from siblings.child_probabilities)."""
    value = np.ones(tree.size)
    for i in range(1, tree.size):
        value[i] = value[tree.parent[i]] * q[tree.depth[i] - 1, tree.rank[i]]
    return value


def expected_tokens(tree: Tree, q: np.ndarray) -> float:
    """Expected tokens a verification commits (accepted drafts + the target's own token):
    1 + sum over the non-root nodes of the product of acceptance probabilities along the path
    (Sequoia's F(T), arXiv 2402.12374, section 3.1)."""
    return float(node_values(tree, q).sum())
