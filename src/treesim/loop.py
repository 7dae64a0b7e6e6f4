"""The step loop for token trees: src/step_engine.py's one compiled loop, given the tree's draw.

The chain study and the tree study run the same loop (step_engine.run_steps: serving modes,
ragged and lockstep verification, per-step records); a tree is passed as its child table, hazard
steps and sibling shares, and each active slot's verification then walks the grid point's tree
(src/treeshape/accept.py) with its request's top-1 rates by depth, a_d = exp(-h dD_d), computed once
at admission. A chain shape never comes here (src/treesim/serve.py sends it to the chain draw, so
chains keep their numbers bit for bit).
"""
from __future__ import annotations

import src.step_engine as step_engine
from src.step_engine import GREEDY, LOCKSTEP, RAGGED

__all__ = ["run_tree_steps", "GREEDY", "RAGGED", "LOCKSTEP"]


def run_tree_steps(rng, decoder, continuous, batch_size, depth, child, hazard_steps, cum_shares,
                   *arrays):
    """step_engine.run_steps with a token tree of depth `depth` (its gamma): child[i, j] is the
    rank-j child of node i or -1, hazard_steps dD_1..dD_depth (in the chain's hazard_profile
    argument), cum_shares the sibling vector's cumulative shares; `arrays` are run_steps's
    arguments from output_len to accepted."""
    return step_engine.run_steps(rng, decoder, continuous, batch_size, depth, hazard_steps,
                                 *arrays, child, cum_shares)
