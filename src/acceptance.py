"""Acceptance of draft tokens under standard speculative sampling with i.i.d. acceptance.

Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding", ICML), section
3.1-3.4: the target accepts each draft token with probability alpha, independently, until the first
rejection. With gamma drafts the number accepted, K, is a geometric variable capped at gamma:

    P(K = k) = alpha^k (1 - alpha)   for k < gamma,      P(K = gamma) = alpha^gamma.

Every verification also yields one token from the target itself: the correction token sampled from
the adjusted distribution at the first rejection, or the bonus token after all gamma drafts were
accepted. So a step commits K + 1 tokens, with

    E[K + 1] = (1 - alpha^(gamma+1)) / (1 - alpha)                               (Leviathan eq. 1)

and under the flat cost model (target pass = 1, draft pass = c) the expected walltime improvement is

    (1 - alpha^(gamma+1)) / ((1 - alpha) (gamma c + 1))                         (Leviathan Thm 3.8).
"""
from __future__ import annotations

import numpy as np


def accepted_drafts_from_exponentials(exp_draws: np.ndarray, alpha: np.ndarray, gamma) -> np.ndarray:
    """Draft tokens accepted before the first rejection, capped at gamma, from Exp(1) draws.

    Inverse transform of the geometric law: with E ~ Exp(1), floor(E / -ln(alpha)) is >= k with
    probability exp(k ln alpha) = alpha^k, which is exactly P(K >= k) under i.i.d. acceptance.
    `gamma` broadcasts against the result (an int, or one value per row as an [R, 1] array).
    """
    accepted = (exp_draws / -np.log(alpha)).astype(np.int64)
    return np.minimum(accepted, gamma, out=accepted)


def sample_accepted_drafts(rng: np.random.Generator, alpha: np.ndarray, gamma) -> np.ndarray:
    """K = min(Geometric(1 - alpha) - 1, gamma) for every entry of alpha."""
    return accepted_drafts_from_exponentials(rng.standard_exponential(alpha.shape), alpha, gamma)


def expected_tokens_per_step(alpha, gamma):
    """E[K + 1] = (1 - alpha^(gamma+1)) / (1 - alpha): committed tokens per verification."""
    alpha = np.asarray(alpha, dtype=float)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_acceptance_rate(alpha, gamma):
    """E[K] / gamma = alpha (1 - alpha^gamma) / (gamma (1 - alpha)): accepted / proposed drafts."""
    alpha = np.asarray(alpha, dtype=float)
    return alpha * (1.0 - alpha ** gamma) / (gamma * (1.0 - alpha))


def expected_speedup_flat(alpha, gamma, draft_cost):
    """Leviathan Thm 3.8: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), batch 1, long outputs."""
    return expected_tokens_per_step(alpha, gamma) / (gamma * draft_cost + 1.0)
