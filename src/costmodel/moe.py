"""Mixture-of-Experts routing: how many distinct experts a pass touches per MoE layer.

A pass over S sequences x t positions per sequence (T = S t tokens) routes every token to k of
the layer's E routed experts. Each touched expert's weights are read once per pass, and it runs
one GEMM over the tokens routed to it, so the pass's expert cost is

    expert cost = D(S, t) x gemm(rows = T k / D(S, t))    per MoE layer

with D the expected number of distinct experts touched (design.md, "Mixture of Experts").

Routing models (ModelSpec.routing):
  uniform   every token draws a uniformly random k-subset, independently:
                D = E (1 - (1 - k/E)^T)                              (MoESD, arXiv 2505.19645)
  locality  the first token of each sequence draws a uniform k-subset; each later token of the
            same sequence keeps each of its k slots on one of the previous token's experts with
            probability rho and otherwise draws it fresh: its F ~ Binomial(k, 1 - rho) fresh
            slots are a uniform F-subset of the E experts. Sequences are independent. Then
                P(an expert is untouched by one sequence) = (1 - k/E) (1 - k (1 - rho)/E)^(t-1)
                D = E (1 - (1 - k/E)^S (1 - k (1 - rho)/E)^(S (t - 1)))
            exactly (rho = 0 is `uniform`). Consecutive tokens then share a fraction
            rho + (1 - rho) k/E of their experts on average.
"""
from __future__ import annotations

import numpy as np

ROUTING_MODELS = ("uniform", "locality")
# rho of the `locality` model, from the one direct measurement of consecutive-token expert
# overlap found: GLM-4.7-Flash (64 routed experts, top-4), router instrumented over 96 greedy
# decode steps x all MoE layers (4,370 layer-position pairs): consecutive positions share 25.7% of
# their top-4 experts, chance being 4/64 (ml-explore/mlx-lm PR #1485, comment of 2026-07-26).
# share = rho + (1 - rho) k/E  =>  rho = (0.257 - 0.0625) / (1 - 0.0625). Taken for every MoE
# preset: an assumption for models other than GLM-4.7-Flash (design.md says where it breaks).
MEASURED_CONSECUTIVE_SHARE = 0.257
MEASURED_SHARE_K_OVER_E = 4 / 64
DEFAULT_ROUTING_LOCALITY = ((MEASURED_CONSECUTIVE_SHARE - MEASURED_SHARE_K_OVER_E)
                            / (1.0 - MEASURED_SHARE_K_OVER_E))


def routing_locality(routing: str, locality_fraction: float | None) -> float:
    """rho of a routing model: 0 for uniform, the preset's value or the default for locality."""
    if routing == "uniform":
        return 0.0
    return DEFAULT_ROUTING_LOCALITY if locality_fraction is None else float(locality_fraction)


def expected_distinct_experts(n_experts: int, top_k: int, n_seqs, tokens_per_seq,
                              locality: float = 0.0):
    """Expected distinct experts touched per MoE layer by n_seqs sequences x tokens_per_seq tokens
    (arrays broadcast; 0 where either is 0) under the locality model with rho = locality
    (0 = uniform routing): E (1 - (1 - k/E)^S (1 - k (1 - rho)/E)^(S (t - 1)))."""
    S = np.asarray(n_seqs, dtype=float)
    t = np.asarray(tokens_per_seq, dtype=float)
    D = distinct_experts_of_draws(n_experts, top_k, S, S * np.maximum(t - 1.0, 0.0), locality)
    return np.where((S > 0) & (t > 0), D, 0.0)


def distinct_experts_of_draws(n_experts: int, top_k: int, first_draws, later_draws,
                              locality: float = 0.0):
    """Expected distinct experts touched per MoE layer by a pass whose tokens are first_draws
    first tokens of their sequence's run in the pass (a uniform k-subset each) and later_draws
    later ones (k (1 - rho) fresh slots each): E (1 - (1 - k/E)^first (1 - k (1 - rho)/E)^later).
    Sequences are independent, so a mixed pass (decoding sequences of t positions beside prompt
    chunks) is the sum of its parts' draws: first = S + P, later = S (t - 1) + N - P."""
    E, k = float(n_experts), float(top_k)
    S = np.asarray(first_draws, dtype=float)
    later_draws = np.asarray(later_draws, dtype=float)

    def log_untouched(draws, p):  # draws x log(1 - p), with 0 x log(0) = 0
        if p >= 1.0:
            return np.where(draws > 0, -np.inf, 0.0)
        return draws * np.log1p(-p)

    first = log_untouched(S, k / E)
    later = log_untouched(later_draws, k * (1.0 - locality) / E)
    return np.where(S > 0, E * -np.expm1(first + later), 0.0)


def simulate_distinct_experts(n_experts: int, top_k: int, n_seqs: int, tokens_per_seq: int,
                              locality: float, n_trials: int, seed: int) -> np.ndarray:
    """Monte Carlo of the locality routing model (the check of expected_distinct_experts): the
    distinct experts touched in each of n_trials independent passes, int[n_trials]."""
    rng = np.random.default_rng(seed)
    E, k = n_experts, top_k
    touched = np.zeros((n_trials, E), bool)
    rows = np.arange(n_trials)[:, None]
    slots = np.arange(k)[None, :]
    for _ in range(n_seqs):
        for j in range(tokens_per_seq):
            # the k smallest of E uniform keys, in key order: any prefix is a uniform subset
            order = np.argsort(rng.random((n_trials, E)), axis=1)[:, :k]
            fresh = (np.full(n_trials, k) if j == 0
                     else rng.binomial(k, 1.0 - locality, size=n_trials))
            touched[rows, order] |= slots < fresh[:, None]
    return touched.sum(axis=1)
