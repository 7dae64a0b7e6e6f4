"""Routing of the MoE layers `measure-moe` times: which experts each token of a pass reads.

Pure numpy (no torch), so the routing a measurement used can be reproduced and tested anywhere.

A pass of T tokens through a layer with E routed experts, each token routed to k of them:

    popularity  p_e proportional to r_e^(-s),  r = a random permutation of 1..E per layer
    per token   k distinct experts drawn without replacement with probabilities p
                (Gumbel top-k: the k largest of log p_e + Gumbel noise)

s = `skew` >= 0 is the Zipf exponent of expert popularity. s = 0 is uniform independent routing,
for which the expected number of distinct experts the pass touches is exactly

    E [1 - (1 - k/E)^T]

(each token leaves a given expert out with probability 1 - k/E, independently). s > 0 concentrates
the tokens on fewer experts, as real routers do (consecutive tokens reuse experts; arXiv
2505.16056 measures it); the skewed configuration `measure-moe` times by default is s = 1.0, an
assumption chosen to be clearly apart from uniform, not a measured router (design.md, section 16).
The real gate (softmax of x W_router) still runs in the timed layer; only its choice of experts
is replaced by this draw, fixed per configuration, so every repetition reads the same experts and
the pass can be captured in a CUDA graph.
"""
from __future__ import annotations

import numpy as np


def check_routing(experts: int, top_k: int, skew: float) -> None:
    """Raise ValueError naming the bad value: 1 <= top_k <= experts, skew finite and >= 0."""
    if experts < 1:
        raise ValueError(f"experts {experts}: must be >= 1")
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k {top_k}: must be between 1 and experts ({experts})")
    if not np.isfinite(skew) or skew < 0:
        raise ValueError(f"skew {skew}: must be a finite number >= 0")


def popularity(experts: int, skew: float, rng: np.random.Generator) -> np.ndarray:
    """Expert selection probabilities p_e ~ rank^(-skew), ranks randomly permuted; sums to 1."""
    ranks = rng.permutation(experts) + 1.0
    weights = ranks ** (-float(skew))
    return weights / weights.sum()


def route(tokens: int, experts: int, top_k: int, skew: float,
          rng: np.random.Generator) -> np.ndarray:
    """Expert ids [tokens, top_k] of one layer's pass: k distinct experts per token (Gumbel top-k
    over log popularity), int64."""
    check_routing(experts, top_k, skew)
    if tokens < 1:
        raise ValueError(f"tokens {tokens}: must be >= 1")
    logp = np.log(popularity(experts, skew, rng))
    keys = logp[None, :] + rng.gumbel(size=(tokens, experts))
    chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
    return np.sort(chosen, axis=1).astype(np.int64)


def tokens_per_expert(assignment: np.ndarray, experts: int) -> np.ndarray:
    """Rows each expert receives in the pass [experts] (0 for an expert nobody routes to)."""
    return np.bincount(assignment.ravel(), minlength=experts)


def distinct_experts(assignment: np.ndarray) -> int:
    """Experts the pass touches (whose weights it must read)."""
    return int(np.unique(assignment).size)


def expected_distinct_uniform(tokens, experts: int, top_k: int):
    """E [1 - (1 - k/E)^T]: expected distinct experts of T tokens under uniform routing."""
    t = np.asarray(tokens, dtype=float)
    return experts * (1.0 - (1.0 - top_k / experts) ** t)
