"""One verification of a token tree: which path the target accepts (the per-step draw).

Walk from the root: at an accepted node of depth d - 1 draw u ~ U(0, 1); the rank-1 child is
accepted if u < a_d, otherwise the rank-j child (j >= 2) if (u - a_d) / (1 - a_d) falls in the
j-th share interval [r_2 + ... + r_{j-1}, r_2 + ... + r_j) of the sibling vector (siblings.py),
and none if it falls past them. The walk stops at a rejection or at a node without that child;
the depth reached is the number of accepted drafts K, and the step commits K + 1 tokens. So
P(node accepted) = product of the child probabilities along its path, and
E[K + 1] = 1 + sum over non-root nodes of that product (tree.expected_tokens): the closed form
the simulator is checked against. The draw is scalar arithmetic so numba compiles it.

A request's top-1 rate at depth d is a_d = exp(-h (D_d - D_{d-1})) with h = -ln alpha its hazard
scale and D the mode's hazard profile (src/acceptance.py; D_d = d for i.i.d. acceptance, a_d =
alpha).
"""
from __future__ import annotations

import math

import numpy as np


def accepted_tree_drafts(rng, child: np.ndarray, rates: np.ndarray, cum_shares: np.ndarray) -> int:
    """Accepted drafts of one tree verification, one rng.random() per level walked.
    child[i, j]: rank-j child of node i or -1; rates[d]: top-1 rate at depth d + 1 (len = the
    tree's depth); cum_shares[j - 1] = r_2 + ... + r_{j+1}."""
    node = 0
    depth = 0
    width = child.shape[1]
    while depth < rates.size:
        u = rng.random()
        a = rates[depth]
        if u < a:
            j = 0
        else:
            w = (u - a) / (1.0 - a)
            j = 1
            while j - 1 < cum_shares.size and w >= cum_shares[j - 1]:
                j += 1
            if j - 1 >= cum_shares.size:
                return depth
        if j >= width or child[node, j] < 0:
            return depth
        node = child[node, j]
        depth += 1
    return depth


def depth_rates(hazard_scale: float, hazard_steps: np.ndarray) -> np.ndarray:
    """a_d = exp(-h dD_d) for d = 1..len(hazard_steps)."""
    out = np.empty(hazard_steps.size)
    for d in range(hazard_steps.size):
        out[d] = math.exp(-hazard_scale * hazard_steps[d])
    return out


def hazard_steps(profile: np.ndarray | None, depth: int) -> np.ndarray:
    """dD_d = D_d - D_{d-1}, d = 1..depth (ones for i.i.d. acceptance)."""
    if profile is None:
        return np.ones(depth)
    return np.diff(np.r_[0.0, np.asarray(profile, dtype=float)[:depth]])
