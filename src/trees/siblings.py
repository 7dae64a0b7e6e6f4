"""The sibling acceptance vector: how often the k-th ranked child is the accepted one.

Sequoia's positional model (Chen et al., "Sequoia: Scalable, Robust, and Hardware-aware
Speculative Decoding", arXiv 2402.12374): once a node is accepted, its k-th ranked child is
accepted with probability p_k, independent of depth; the events are exclusive (at most one child
is the target's token), so sum_k p_k <= 1. Sequoia measures p_1, p_2, ... per draft/target pair.

The project's quality modes give the top-1 rate by depth, a_d (a request's chain rates). The two
are combined by keeping Sequoia's split of the top-1 child's rejection mass among the siblings:
with shares r_k = p_k / (1 - p_1) (k >= 2) of the vector as measured, a node at depth d - 1 has

    P(child 1 accepted) = a_d,      P(child k accepted) = (1 - a_d) r_k   (k >= 2).

With a_d = p_1 at every depth this is Sequoia's model exactly. Children past the vector's length
are never accepted (their share is 0).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Sequoia (arXiv 2402.12374), Appendix E: acceptance vector measured for a Llama3-70B target with
# a Llama3-8B draft on CNN DailyMail, p_1..p_6 (via /work/shared/reference/moe-and-trees.md).
SEQUOIA_VECTOR = (0.7732, 0.1039, 0.0402, 0.0206, 0.0128, 0.0081)
SEQUOIA_SOURCE = ("Sequoia (Chen et al., arXiv 2402.12374) App. E: Llama3-70B / Llama3-8B, "
                  "CNN DailyMail")


class SiblingError(ValueError):
    """A sibling vector the model cannot use; str() says what is allowed."""


@dataclass(frozen=True)
class SiblingVector:
    """p_2, p_3, ... and the top-1 rate p_1 they were measured beside."""

    rates: tuple[float, ...] = SEQUOIA_VECTOR[1:]  # p_2, p_3, ...: non-increasing, in [0, 1)
    top1_rate: float = SEQUOIA_VECTOR[0]  # p_1 of the same measurement, in (0, 1)

    @property
    def shares(self) -> np.ndarray:
        """r_k = p_k / (1 - p_1), k = 2..: the split of a rejected top-1 child's mass."""
        return np.asarray(self.rates, dtype=float) / (1.0 - self.top1_rate)


def check_siblings(rates, top1_rate: float) -> SiblingVector:
    """SiblingError unless 0 < p_1 < 1, 0 <= p_k, p_2 >= p_3 >= ... and p_1 + sum p_k <= 1."""
    rates = tuple(float(r) for r in rates)
    if not 0.0 < top1_rate < 1.0:
        raise SiblingError(f"the top-1 rate p_1 must lie strictly between 0 and 1, got {top1_rate}")
    if not 1 <= len(rates) <= 15:
        raise SiblingError("expected 1..15 sibling rates p_2, p_3, ...")
    if any(not 0.0 <= r < 1.0 for r in rates):
        raise SiblingError(f"each sibling rate must lie in [0, 1), got {list(rates)}")
    rises = [i for i in range(1, len(rates)) if rates[i] > rates[i - 1]]
    if rises:
        i = rises[0]
        raise SiblingError(f"sibling rates must not rise with rank (the k-th ranked child is "
                           f"accepted no more often than the (k-1)-th): p_{i + 2} = {rates[i]} > "
                           f"p_{i + 1} = {rates[i - 1]}")
    if top1_rate + sum(rates) > 1.0 + 1e-9:
        raise SiblingError(f"p_1 + p_2 + ... = {top1_rate + sum(rates):.4g} exceeds 1 (at most "
                           "one child is accepted)")
    return SiblingVector(rates, top1_rate)


def parse_vector(items) -> tuple[float, ...]:
    """Sequoia's vector p_1, p_2, ... (numbers or numeric strings) -> checked tuple."""
    try:
        if any(isinstance(v, str) and not (v.isascii() and "_" not in v) for v in items):
            raise ValueError  # float() reads '٣' as 3 and '1_0' as 10 (src/errors.ascii_float)
        values = [float(v) for v in items]
    except (TypeError, ValueError):
        raise SiblingError(f"expected numbers p_1, p_2, ..., got {list(items)}") from None
    if len(values) < 2 or any(isinstance(v, bool) for v in items):
        raise SiblingError("expected p_1 and at least one sibling rate p_2")
    check_siblings(values[1:], values[0])
    return tuple(values)


def vector_siblings(vector) -> SiblingVector:
    """The SiblingVector of a checked Sequoia vector (p_1, p_2, ...)."""
    return SiblingVector(tuple(vector[1:]), vector[0])


def child_probabilities(depth_rates: np.ndarray, shares: np.ndarray, topk: int) -> np.ndarray:
    """q[d - 1, j - 1] = P(child of rank j accepted | its parent at depth d - 1 accepted), for
    d = 1..len(depth_rates), j = 1..topk: a_d for j = 1, (1 - a_d) r_j beyond."""
    a = np.asarray(depth_rates, dtype=float)[:, None]
    r = np.zeros(max(topk - 1, 0))
    r[:min(topk - 1, shares.size)] = shares[:topk - 1]
    return np.concatenate([a, (1.0 - a) * r[None, :]], axis=1)[:, :topk]
