"""An i.i.d. per-token rate from a mean acceptance length measured with a token tree.

SGLang's accept length with --speculative-eagle-topk > 1 is a tree's: tau = 1 + the mean depth of
the accepted path per verification, for the shape (S, K, N) the server ran. Under the tree
acceptance model (siblings.py, select.py) the expected tokens per verification of the tree SGLang
selects for a request of top-1 rate alpha is F(alpha) = 1 + sum of path probabilities; the rate
fitted is the alpha with F(alpha) = tau, found by bisection on a bracket where F rises (F is
scanned on a fine grid first: with wide trees it need not rise from alpha -> 0, where the
siblings alone accept some tokens). The fit uses the default sibling vector (Sequoia's) unless
one is given. A chain shape (K = 1) is the chain's closed form (src/acceptance_data/sglang.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.treeshape.select import sglang_tree
from src.treeshape.shape import TreeShape
from src.treeshape.siblings import SiblingVector, child_probabilities
from src.treeshape.tree import expected_tokens

ALPHA_RANGE = (0.001, 0.999)  # = config.ALPHA_CLIP


class TreeFitError(ValueError):
    """No rate gives the measured length; str() names the lengths the shape can give."""


def tree_tokens(alpha: float, shape: TreeShape, siblings: SiblingVector) -> float:
    q = child_probabilities(np.full(shape.steps, alpha), siblings.shares, shape.topk)
    return expected_tokens(sglang_tree(shape, q), q)


def alpha_from_tree_length(tau: float, shape: TreeShape,
                           siblings: SiblingVector = SiblingVector()) -> float:
    grid = np.linspace(*ALPHA_RANGE, 199)
    values = np.array([tree_tokens(a, shape, siblings) for a in grid])
    # the last rising stretch, up to the top of the range
    start = len(values) - 1
    while start > 0 and values[start - 1] < values[start]:
        start -= 1
    lo_v, hi_v = values[start], values[-1]
    if not lo_v < tau < hi_v:
        raise TreeFitError(f"a mean acceptance length of {tau:g} with the tree {shape.label} "
                           f"needs lengths in {lo_v:.3f}..{hi_v:.3f} (top-1 rates "
                           f"{grid[start]:.3f}..{ALPHA_RANGE[1]} under the sibling vector)")
    lo, hi = grid[start], grid[-1]
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tree_tokens(mid, shape, siblings) < tau else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class TreeLengthAcceptance:
    tau: float
    shape: TreeShape
    alpha: float
    sibling_vector: tuple | None = None  # Sequoia's p_1, p_2, ... of the fit; None: the default

    @property
    def mode_name(self) -> str:
        s = self.shape
        return f"tau{self.tau:g}_s{s.steps}k{s.topk}n{s.tokens}"

    def describe(self) -> list[str]:
        return [f"mean acceptance length {self.tau:g} with the tree {self.shape.label} "
                f"(S:K:N, bonus token included) -> top-1 per-token rate alpha = {self.alpha:.4f} "
                "(tree acceptance model, "
                + ("default sibling vector)" if self.sibling_vector is None else
                   f"sibling vector {list(self.sibling_vector)})"),
                "  (the weaker input: a single mean hides any decay along the draft and the "
                "siblings' real shares; other shapes are extrapolated)",
                "  (trees run only on engine profiles that verify them: add --scenario "
                "configs/scenarios/h100-llama8b-eagle-trees.toml, or a scenario of yours with "
                "engine_profiles = [\"sglang\"] and trees, to compare shapes)"]
