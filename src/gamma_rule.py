"""The rule that turns a speedup per (gamma, batch size) into a gamma schedule with few ranges.

The steady-state best gamma per batch size (src/online/policies.py, `steady_state_gammas`) is the
argmax of an objective that is flat near its top and carries small steps of the modelled kernels
(GEMM waves, attention splits, the all-reduce kernel switch at TP > 1): taken literally it
flip-flops between neighbouring gammas from one batch size to the next (19 ranges for an n-gram
draft on an H200). A schedule should switch gamma only where the modelled gain is resolved, so:

    g is admissible at batch b when speedup(g, b) x (1 + tolerance) >= max_g' speedup(g', b)

(gamma 0, no speculation, counts with speedup 1), and the schedule is the fewest ranges of
consecutive batch sizes such that one gamma is admissible at every batch of its range. Covering
1..B with the fewest such runs is an interval cover: from the first uncovered batch, take the gamma
whose admissible run reaches farthest; this greedy choice is optimal (any cover's first range ends
no later, by induction). Among gammas that reach equally far, the one with the highest mean
speedup over the range wins, then the smaller gamma. Every batch size so loses at most
`tolerance` of its best modelled speedup, and no range is shorter than the objective forces.

A gamma above the previous range's is a candidate only where it is faster than the previous gamma
by more than the tolerance at the range's first batch (issue 24, section 6: a rise smaller than
the model's stated uncertainty is not one to explain to a user). The best gamma there always
qualifies (the previous one is not admissible there), so every batch keeps its guarantee; where
the condition removes the farthest-reaching gamma, the schedule may have a range more than the
fewest (the interval-cover optimum is then that of the fewest ranges without such a rise, which
the greedy choice approximates; tests/test_online_gamma_rule.py checks it).
"""
from __future__ import annotations

import numpy as np

# 6%: the model's stated uncertainty on a pass's GEMMs, the per-GPU refit's held-out median
# |error| against vLLM 0.24.0's measured GEMM rows (5.8% H100, 5.6% H200; src/presets/
# kernel_efficiency.toml, design.md "GEMM efficiencies re-fitted"), rounded up. Priced from the
# measured rows themselves, neighbouring batch sizes step by 2-5% where vLLM switches GEMM
# kernels (the H200 n-gram case of issue 24: 10 ranges at 2%); a gain no larger than the pricing's
# own error is not a reason to switch, nor to raise gamma with batch size
SCHEDULE_TOLERANCE = 0.06
MAX_RANGES = 6  # issue 24: a printed schedule has at most this many ranges


def tolerant_gammas(by_gamma: np.ndarray, tolerance: float = SCHEDULE_TOLERANCE) -> np.ndarray:
    """Gamma per batch size (index 0 unused) by the module's rule.

    by_gamma: [max_gamma + 1, max_batch + 1] speedup of each gamma (row 0: no speculation, 1.0)
    at each batch size (column 0 unused), as steady_state_gammas returns it. tolerance >= 0; 0
    gives the per-batch best (ties to the longest run).
    """
    s = np.asarray(by_gamma, float)[:, 1:]
    s[0] = 1.0
    n_gamma, n_batch = s.shape
    ok = s * (1.0 + tolerance) >= s.max(axis=0)[None, :]
    # run[g, b]: how many consecutive batches from b on admit g
    run = np.zeros((n_gamma, n_batch + 1), np.int64)
    for b in range(n_batch - 1, -1, -1):
        run[:, b] = np.where(ok[:, b], run[:, b + 1] + 1, 0)
    out = np.zeros(n_batch + 1, np.int64)
    gammas = np.arange(n_gamma)
    b, prev = 0, None
    while b < n_batch:
        reach = run[:, b].copy()
        if prev is not None:
            # issue 24: gamma rises with batch size only where the rise is worth more than the
            # tolerance at the batch it happens (prev is not admissible here, so the best gamma,
            # better than prev by more than the tolerance, always qualifies)
            reach[(gammas > prev) & (s[:, b] < (1.0 + tolerance) * s[prev, b])] = 0
        far = int(reach.max())
        cands = np.nonzero(reach == far)[0]
        means = s[cands, b:b + far].mean(axis=1)
        g = int(cands[np.argmax(means)])  # argmax: the first (smallest) of equal means
        out[1 + b:1 + b + far] = g
        b, prev = b + far, g
    return out


def n_ranges(gammas: np.ndarray) -> int:
    """Ranges of constant gamma in a per-batch schedule (index 0 unused)."""
    g = np.asarray(gammas)[1:]
    return int(1 + np.count_nonzero(np.diff(g))) if g.size else 0


def capped_gammas(by_gamma: np.ndarray, tolerance: float = SCHEDULE_TOLERANCE,
                  max_ranges: int = MAX_RANGES) -> tuple[np.ndarray, float]:
    """(tolerant_gammas, the tolerance used): `tolerance`, widened x 1.25 at a time until the
    schedule has at most `max_ranges` ranges (tolerance 0, the per-batch best, is never widened:
    it is asked for literally)."""
    gammas = tolerant_gammas(by_gamma, tolerance)
    used = tolerance
    while tolerance > 0 and n_ranges(gammas) > max_ranges:
        used *= 1.25
        gammas = tolerant_gammas(by_gamma, used)
    return gammas, used


def rises(gammas: np.ndarray) -> list[tuple[int, int, int]]:
    """(batch, gamma before, gamma from there) wherever the schedule's gamma goes up with batch
    size (index 0 of `gammas` unused)."""
    g = np.asarray(gammas)
    return [(b, int(g[b - 1]), int(g[b])) for b in range(2, g.size) if g[b] > g[b - 1]]


def tops_out(gammas: np.ndarray, max_gamma: int) -> bool:
    """Whether the schedule uses the largest gamma considered: the optimum may lie above it."""
    return int(np.max(gammas)) >= max_gamma
