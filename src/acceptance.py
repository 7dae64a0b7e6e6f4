"""Acceptance of draft tokens under standard speculative sampling: i.i.d. and per-position rates.

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

Per-position acceptance. Real drafts accept their first token more often than their fifth (EAGLE,
Li et al. 2024, reports this as "n-alpha"; vLLM counts it per position). With conditional rates
a_1, a_2, ... (a_i = P(draft token i accepted | tokens 1..i-1 accepted); positions past the last
given rate reuse it), P(K >= i) = a_1 a_2 ... a_i and

    E[K + 1] = 1 + sum_{i <= gamma} prod_{j <= i} a_j.

Both laws are one sampler. Write the cumulative hazard C_i = sum_{j <= i} -ln a_j, so that
P(K >= i) = exp(-C_i). With E ~ Exp(1), K = #{i <= gamma : C_i <= E} has exactly that law. A
request's spread enters as a scale s on the hazard (its rates are a_i^s): K = #{i : s C_i <= E}.
The engine keeps one number per request, its representative per-token rate alpha = exp(-s Cbar)
with Cbar = C_k / k (the geometric mean of its conditional rates over the k given positions), and
the mode keeps the shape D_i = C_i / Cbar (the "hazard profile"), so that

    K = #{i <= gamma : D_i <= E / -ln(alpha)}.

For i.i.d. acceptance D_i = i and this is floor(E / -ln alpha), the inverse-transform sampler the
reference study has always used (that path is kept as it is, so its numbers do not change).
"""
from __future__ import annotations

import numpy as np


def accepted_drafts_from_exponentials(exp_draws: np.ndarray, alpha: np.ndarray, gamma,
                                      hazard_profile: np.ndarray | None = None) -> np.ndarray:
    """Draft tokens accepted before the first rejection, capped at gamma, from Exp(1) draws.

    i.i.d. (hazard_profile None): with E ~ Exp(1), floor(E / -ln(alpha)) is >= k with probability
    exp(k ln alpha) = alpha^k, which is exactly P(K >= k) under i.i.d. acceptance.
    Per position: K = #{i : D_i <= E / -ln(alpha)} with D = hazard_profile (see the module
    docstring), so P(K >= i) = alpha^(D_i) = prod_{j <= i} a_j(request).
    `gamma` broadcasts against the result (an int, or one value per row as an [R, 1] array).
    """
    if hazard_profile is None:
        accepted = (exp_draws / -np.log(alpha)).astype(np.int64)
    else:
        accepted = np.searchsorted(hazard_profile, exp_draws / -np.log(alpha), side="right")
    return np.minimum(accepted, gamma, out=accepted)


def accepted_drafts_from_exponential(exp_draw: float, hazard_scale: float,
                                     hazard_profile: np.ndarray, gamma: int) -> int:
    """One step's K from one Exp(1) variate E: the engine's inner loop compiles and calls this
    (src/step_engine.py), so keep it to scalar arithmetic numba can compile.

    The scalar form of accepted_drafts_from_exponentials, hazard_scale = -ln(alpha):
    K = #{i <= gamma : D_i <= E / hazard_scale}; an empty hazard_profile means i.i.d. acceptance
    (D_i = i), i.e. min(floor(E / -ln alpha), gamma).
    """
    x = exp_draw / hazard_scale
    if hazard_profile.size == 0:
        return int(min(x, gamma))  # branch-free min(floor(x), gamma) for x >= 0
    k = 0
    while k < gamma and hazard_profile[k] <= x:
        k += 1
    return k


def sample_accepted_drafts(rng: np.random.Generator, alpha: np.ndarray, gamma,
                           hazard_profile: np.ndarray | None = None) -> np.ndarray:
    """K = min(Geometric(1 - alpha) - 1, gamma) for every entry of alpha (or its per-position
    law)."""
    return accepted_drafts_from_exponentials(rng.standard_exponential(alpha.shape), alpha, gamma,
                                             hazard_profile)


# --- per-position rates: their hazard representation --------------------------------------------

def position_rates(rates, gamma: int) -> np.ndarray:
    """a_1..a_gamma: the given conditional rates, positions past the last one reusing it."""
    rates = np.asarray(rates, dtype=float)
    if gamma <= rates.size:
        return rates[:gamma]
    return np.concatenate([rates, np.full(gamma - rates.size, rates[-1])])


def mean_hazard(rates) -> float:
    """Cbar = C_k / k = -mean(ln a_i) over the k given rates: -ln of their geometric mean."""
    return float(-np.mean(np.log(np.asarray(rates, dtype=float))))


def hazard_profile(rates, positions: int) -> np.ndarray | None:
    """D_i = C_i / Cbar for i = 1..positions; None when all rates are equal (i.i.d. acceptance).

    Non-decreasing (a rate of 1 adds no hazard, so that position is always accepted once reached).
    Needs at least one rate below 1 (Cbar > 0).
    """
    rates = np.asarray(rates, dtype=float)
    if np.all(rates == rates[0]):
        return None
    hazards = -np.log(position_rates(rates, positions))
    return np.cumsum(hazards) / mean_hazard(rates)


# --- closed forms ---------------------------------------------------------------------------------

def expected_tokens_per_step(alpha, gamma):
    """E[K + 1] = (1 - alpha^(gamma+1)) / (1 - alpha): committed tokens per verification."""
    alpha = np.asarray(alpha, dtype=float)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_acceptance_rate(alpha, gamma):
    """E[K] / gamma = alpha (1 - alpha^gamma) / (gamma (1 - alpha)): accepted / proposed drafts."""
    alpha = np.asarray(alpha, dtype=float)
    return alpha * (1.0 - alpha ** gamma) / (gamma * (1.0 - alpha))


def expected_speedup_flat(alpha, gamma, draft_cost):
    """Leviathan Thm 3.8: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), batch 1, long
    outputs."""
    return expected_tokens_per_step(alpha, gamma) / (gamma * draft_cost + 1.0)


def expected_tokens_per_step_per_position(rates, gamma: int) -> float:
    """E[K + 1] = 1 + sum_{i <= gamma} prod_{j <= i} a_j (positions past the given rates reuse the
    last)."""
    return float(1.0 + np.cumprod(position_rates(rates, gamma)).sum())


def expected_acceptance_rate_per_position(rates, gamma: int) -> float:
    """E[K] / gamma = sum_{i <= gamma} prod_{j <= i} a_j / gamma: accepted / proposed drafts."""
    return (expected_tokens_per_step_per_position(rates, gamma) - 1.0) / gamma


def expected_speedup_flat_per_position(rates, gamma: int, draft_cost: float) -> float:
    """E[K + 1] / (gamma c + 1): Leviathan Thm 3.8 with per-position rates (batch 1, long
    outputs)."""
    return expected_tokens_per_step_per_position(rates, gamma) / (gamma * draft_cost + 1.0)


def expected_tokens_per_step_profile(alpha, gamma: int, profile: np.ndarray | None):
    """E[K + 1] per request from its representative alpha and the mode's hazard profile D:
    1 + sum_{i <= gamma} alpha^(D_i); for profile None the i.i.d. closed form."""
    if profile is None:
        return expected_tokens_per_step(alpha, gamma)
    log_alpha = np.log(np.asarray(alpha, dtype=float))[..., None]
    return 1.0 + np.exp(log_alpha * profile[:gamma]).sum(axis=-1)


def iid_alpha_from_tokens_per_step(tokens_per_step: float, gamma: int) -> float:
    """The alpha with (1 - alpha^(gamma+1)) / (1 - alpha) = tokens_per_step: the i.i.d. inversion.

    The left side, 1 + alpha + ... + alpha^gamma, rises from 1 (alpha -> 0) to gamma + 1
    (alpha -> 1), so a root exists for 1 < tokens_per_step < gamma + 1 (ValueError otherwise);
    found by bisection to machine precision.
    """
    if not 1.0 < tokens_per_step < gamma + 1.0:
        raise ValueError(f"tokens per step must lie strictly between 1 and gamma + 1 = {gamma + 1}")
    powers = np.arange(gamma + 1)
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(np.sum(mid ** powers)) < tokens_per_step else (lo, mid)
    return (lo + hi) / 2


# --- an MTP module reused past its depth ----------------------------------------------------------
# A checkpoint's MTP modules (DeepSeek-V3: num_nextn_predict_layers = 1) each predict one token
# further; vLLM (vllm/config/speculative.py: num_speculative_tokens may exceed n_predict if it is a
# multiple) and SGLang (NEXTN through its EAGLE worker) reuse them autoregressively for deeper
# drafts, on inputs they were not trained for, so the conditional rate of a reused position falls:
#     a_i = alpha                      for i <= L (the checkpoint's MTP depth),
#     a_i = alpha * d^(i - L)          for i > L,
# and E[K + 1] = 1 + sum_{i <= gamma} prod_{j <= i} a_j. For L = 1, prod_{j <= i} a_j =
# alpha^i d^(i (i - 1) / 2). d is fitted to DeepSeek-V3's own figures (design.md, "MTP depth"):
# alpha = 0.875 (the report's 85-90% second-token acceptance, arXiv 2412.19437 section 5.4.3) and
# tau = 3.20 at K = 7, temperature 0 (nebius/MTP-DeepSeek-V3-0324 model card, "Original MTP": the
# original module reused 7 times) give d = 0.830; the report's 85% and 90% ends give 0.856 and
# 0.804. i.i.d. 0.875 would give tau 5.25 there.
MTP_REUSE_DECAY = 0.83


def mtp_position_rates(alpha: float, mtp_layers: int, positions: int,
                       decay: float = MTP_REUSE_DECAY) -> np.ndarray:
    """a_1..a_positions of an MTP draft with `mtp_layers` trained positions at rate alpha, the
    reused positions past them decaying by `decay` each (the rule above)."""
    if mtp_layers < 1 or positions < 1 or not 0.0 < decay <= 1.0:
        raise ValueError("mtp_layers and positions must be >= 1 and decay in (0, 1]")
    i = np.arange(1, positions + 1)
    return alpha * decay ** np.maximum(i - mtp_layers, 0)


def expected_tokens_per_step_mtp(alpha: float, mtp_layers: int, gamma: int,
                                 decay: float = MTP_REUSE_DECAY) -> float:
    """E[K + 1] of a chain of gamma MTP drafts by the reuse rule: 1 + sum_i prod_{j <= i} a_j."""
    return expected_tokens_per_step_per_position(
        mtp_position_rates(alpha, mtp_layers, gamma, decay), gamma)
