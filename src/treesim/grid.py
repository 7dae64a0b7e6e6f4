"""A tree grid point's replication block inside the sweep (src/sweep.py calls tree_block).

The tree of (quality mode, shape) is selected once per sweep from the mode's representative
request: alpha = the median of 20,000 draws of the mode's distribution (its own random stream),
with the mode's hazard profile, so every batch size and serving mode verifies the same tree.
Block b of a tree shape draws from the stream keyed (..., S, K, N, verification, b).
"""
from __future__ import annotations

import numpy as np

from src.treeshape.siblings import vector_siblings
from src.treesim.serve import mode_tree, serve_tree
from src.workload import acceptance_profile, sample_alpha, stream

REPRESENTATIVE_DRAWS = 20_000


def representative_alpha(seed: int, mode: str, dist) -> float:
    """The median request's alpha of a quality mode."""
    return float(np.median(sample_alpha(stream(seed, "tree-alpha", mode), dist,
                                        (REPRESENTATIVE_DRAWS,))))


def grid_tree(sweep, mode: str, shape):
    """The (cached) tree a sweep's quality mode verifies for `shape`."""
    key = (mode, shape)
    if key not in sweep._trees:
        cfg = sweep.cfg
        dist = cfg.alpha_modes[mode]
        sweep._trees[key] = mode_tree(shape, representative_alpha(cfg.seed, mode, dist),
                                      acceptance_profile(dist), vector_siblings(cfg.sibling_vector))
    return sweep._trees[key]


def tree_block(sweep, mode: str, serving: str, batch_size: int, block: int, shape,
               verification: str):
    cfg = sweep.cfg
    rng = stream(cfg.seed, "accept-tree", mode, serving, batch_size, shape.steps, shape.topk,
                 shape.tokens, verification, block)
    return serve_tree(sweep.requests(mode, batch_size, block), batch_size, serving, sweep.cost,
                      verification, shape, grid_tree(sweep, mode, shape),
                      vector_siblings(cfg.sibling_vector), rng)
