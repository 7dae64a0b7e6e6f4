"""The step loop for token trees: src/step_engine.py's one compiled loop with the tree's draw.

The chain study and the tree study run the same loop (step_engine.run_draw_steps: serving modes,
ragged and lockstep verification, per-step records); only its `draw` argument differs. Here it is
a step_engine.TreeDraw: each active slot's verification walks the grid point's tree
(src/trees/accept.py) with its request's top-1 rates by depth, a_d = exp(-h dD_d), computed once
at admission. A chain shape never comes here (src/trees/serve.py sends it to the chain draw, so
chains keep their numbers bit for bit).
"""
from __future__ import annotations

import src.step_engine as step_engine
from src.step_engine import GREEDY, LOCKSTEP, RAGGED, TreeDraw

__all__ = ["run_tree_steps", "GREEDY", "RAGGED", "LOCKSTEP"]


def run_tree_steps(rng, decoder, continuous, batch_size, depth, child, hazard_steps, cum_shares,
                   *arrays):
    """step_engine.run_draw_steps with a token tree of depth `depth` (its gamma): child[i, j] is
    the rank-j child of node i or -1, hazard_steps dD_1..dD_depth, cum_shares the sibling
    vector's cumulative shares; `arrays` are run_draw_steps's arguments from output_len on."""
    draw = TreeDraw(child, hazard_steps, cum_shares)
    return step_engine.run_draw_steps(rng, draw, decoder, continuous, batch_size, depth, *arrays)
