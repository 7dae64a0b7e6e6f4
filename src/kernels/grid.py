"""Lookup on a measured grid: exact at a grid point, multilinear inside, None outside.

Rule (design.md, "Measured kernels"): along each axis the value between two neighbouring grid
lines x0 < x < x1 is (1 - w) f(x0) + w f(x1) with w = (x - x0) / (x1 - x0), in the raw
coordinates (rows m, n, k; batch, KV length), over all 2^d corners of the enclosing cell. A kernel
time that is affine in each coordinate (a fixed part plus bytes or FLOPs proportional to it, as
in the roofline) is reproduced exactly, and along an axis on which the cell's corner rows are
monotone the interpolated time is monotone too (a convex combination with weights monotone in x).
A point outside the grid, or in a cell with a missing or rejected corner (NaN), is None: the
caller falls back to the roofline.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np


def _bracket(axis: np.ndarray, x: float) -> tuple[int, int, float] | None:
    """(i0, i1, w): axis[i0] <= x <= axis[i1], w the weight of i1; None outside the axis."""
    if x < axis[0] or x > axis[-1]:
        return None
    i1 = int(np.searchsorted(axis, x, side="left"))
    if axis[i1] == x:
        return i1, i1, 0.0
    i0 = i1 - 1
    return i0, i1, float((x - axis[i0]) / (axis[i1] - axis[i0]))


def interpolate(axes: Sequence[np.ndarray], values: np.ndarray,
                point: Sequence[float]) -> float | None:
    """values[i, j, ...] at (axes[0][i], axes[1][j], ...) at `point` by the module's rule."""
    brackets = [_bracket(a, float(x)) for a, x in zip(axes, point)]
    if any(b is None for b in brackets):
        return None
    total = 0.0
    for corner in itertools.product((0, 1), repeat=len(brackets)):
        weight, index = 1.0, []
        for bit, (i0, i1, w) in zip(corner, brackets):
            weight *= w if bit else 1.0 - w
            index.append(i1 if bit else i0)
        if weight == 0.0:
            continue
        v = values[tuple(index)]
        if not np.isfinite(v):
            return None
        total += weight * float(v)
    return total


def along_axis(axis: np.ndarray, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The module's rule along one axis, vectorised over the points x: values[i] at axis[i];
    NaN outside [axis[0], axis[-1]], and NaN in a cell with a NaN corner, except at a grid
    point, which is its own row even beside a rejected (NaN) one."""
    inside = (x >= axis[0]) & (x <= axis[-1])
    xc = np.clip(x, axis[0], axis[-1])
    i1 = np.searchsorted(axis, xc, side="left")
    i0 = np.maximum(i1 - 1, 0)
    exact = axis[i1] == xc
    span = np.where(exact, 1.0, axis[i1] - axis[i0])
    w = np.where(exact, 0.0, (xc - axis[i0]) / span)
    with np.errstate(invalid="ignore"):
        inner = (1.0 - w) * values[i0] + w * values[i1]
    val = np.where(exact, values[i1], inner)
    return np.where(inside, val, np.nan)
