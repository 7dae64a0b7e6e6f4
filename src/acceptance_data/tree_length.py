"""--acceptance-length TAU --shape-measured S:K:N: the option's checks and the mode it makes."""
from __future__ import annotations

from dataclasses import dataclass

from src.acceptance_data import sglang
from src.config import ConfigError, PerPositionAlpha, _number
from src.treeshape.fit import TreeFitError, TreeLengthAcceptance, alpha_from_tree_length
from src.treeshape.shape import TreeShapeError, parse_shape


@dataclass(frozen=True)
class ChainLength:
    """A chain shape G:1:G+1: exactly --gamma-measured G."""

    acc: sglang.LengthAcceptance

    @property
    def mode_name(self) -> str:
        return self.acc.mode_name

    def describe(self) -> list[str]:
        return sglang.describe(self.acc)

    def to_mode(self) -> PerPositionAlpha:
        return sglang.to_mode(self.acc)


@dataclass(frozen=True)
class TreeLength:
    acc: TreeLengthAcceptance

    @property
    def mode_name(self) -> str:
        return self.acc.mode_name

    def describe(self) -> list[str]:
        return self.acc.describe()

    def to_mode(self) -> PerPositionAlpha:
        a = self.acc
        return PerPositionAlpha(rates=(a.alpha,), source=f"mean acceptance length {a.tau:g} with "
                                f"the tree {a.shape.label}, tree-model inversion")


def acceptance_from_tree_length(tau, shape_text, gamma_measured, sibling_vector=None):
    """The mode of a mean accepted length measured with a shape; a tree's rate is fitted under
    `sibling_vector` (Sequoia's p_1, p_2, ...; None: the default), the vector the run uses."""
    if gamma_measured is not None:
        raise ConfigError("--shape-measured", "give either --gamma-measured K (a chain) or "
                                              "--shape-measured S:K:N, not both")
    try:
        shape = parse_shape(shape_text)
    except TreeShapeError as e:
        raise ConfigError("--shape-measured", str(e)) from None
    if shape.is_chain:
        return ChainLength(sglang.acceptance_from_length(tau, shape.steps))
    t = _number("--acceptance-length", tau)
    from src.treeshape.siblings import SiblingVector, vector_siblings
    siblings = SiblingVector() if sibling_vector is None else vector_siblings(sibling_vector)
    try:
        alpha = alpha_from_tree_length(t, shape, siblings)
    except TreeFitError as e:
        raise ConfigError("--acceptance-length", str(e)) from None
    return TreeLength(TreeLengthAcceptance(t, shape, alpha,
                                           None if sibling_vector is None else
                                           tuple(sibling_vector)))
