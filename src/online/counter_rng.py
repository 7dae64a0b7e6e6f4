"""Counter-based uniforms: the draw for (request key, counter) without any generator state.

SplitMix64 (Steele, Lea and Flood 2014, "Fast splittable pseudorandom number generators", OOPSLA;
the finaliser of Java's SplittableRandom) seeded with a request's 64-bit key, read at position
`counter`: state = key + (counter + 1) * 0x9E3779B97F4A7C15, then the mix function. A request's
j-th verification step always uses draw j of its own sequence, however the engine groups steps and
whichever policy runs, so every policy sees the same acceptance draws (common random numbers) and
a replication's numbers do not depend on which other rows are simulated beside it.
"""

from __future__ import annotations

import numpy as np

from src.compiled_cache import compiled_callee  # (before the first njit: the cache's stamp)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = (np.uint64(s) for s in (30, 27, 31, 11))


def uniform_open_closed(key: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """U(0, 1] for every (key, counter) pair (uint64 keys, non-negative integer counters)."""
    z = key + (np.asarray(counter).astype(np.uint64) + np.uint64(1)) * _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    z = z ^ (z >> _S31)
    return ((z >> _S11).astype(np.float64) + 1.0) * 2.0**-53


def request_keys(rng: np.random.Generator, shape) -> np.ndarray:
    """Independent 64-bit keys, one per request."""
    return rng.integers(0, 2**63, size=shape, dtype=np.int64).astype(np.uint64) * np.uint64(
        2
    ) + rng.integers(0, 2, size=shape, dtype=np.int64).astype(np.uint64)


def accepted_drafts(key: np.ndarray, counter: np.ndarray, alpha: np.ndarray, gamma,
                    hazard_profile: np.ndarray | None = None) -> np.ndarray:
    """Drafts accepted before the first rejection, capped at gamma.

    i.i.d. (hazard_profile None): min(floor(ln U / ln alpha), gamma). P(K >= k) = P(U <= alpha^k)
    = alpha^k, the geometric law of i.i.d. acceptance (src.acceptance); gamma broadcasts (0 gives
    0).

    Per position: with E = -ln U ~ Exp(1) and the mode's hazard profile D_1 <= D_2 <= ... (alpha
    being the request's representative rate exp(-s Cbar), src.acceptance),
    K = min(#{i : D_i <= E / -ln alpha}, gamma), so P(K >= i) = alpha^(D_i) = prod_{j <= i} a_j.
    E / -ln alpha is computed as ln U / ln alpha, the same float as the i.i.d. path, so the profile
    D_i = i gives the i.i.d. K bit for bit. The profile needs at least max(gamma) positions.

    The compiled engine (src/online/engine_loop.py) takes the same K from the same U by
    comparisons, K = #{i <= gamma : U <= alpha^(D_i)} (thresholds exp(D_i ln alpha) computed once
    per request): the same law, and the same K as here except where U falls within rounding of a
    threshold (about 1e-16 of the draws)."""
    u = uniform_open_closed(key, counter)
    if hazard_profile is None:
        k = (np.log(u) / np.log(alpha)).astype(np.int64)
    else:
        k = np.searchsorted(hazard_profile, np.log(u) / np.log(alpha), side="right")
    return np.minimum(k, gamma)


_G, _A, _B = (np.uint64(x) for x in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB))


@compiled_callee
def uniform_one(key, counter):
    """uniform_open_closed of one (uint64 key, int counter): the same integer operations (uint64
    arithmetic wraps as numpy's does), the same float, for the compiled engine."""
    z = key + (np.uint64(counter) + np.uint64(1)) * _G
    z = (z ^ (z >> np.uint64(30))) * _A
    z = (z ^ (z >> np.uint64(27))) * _B
    z = z ^ (z >> np.uint64(31))
    return (np.float64(z >> np.uint64(11)) + 1.0) * 2.0**-53
