"""Requests: per-request draft acceptance probability, output length and prompt length.

Random streams are keyed by name, not drawn in sequence: `stream(seed, *key)` seeds a generator from
the root seed and a stable hash of the key, so a grid point gets the same numbers whatever else runs
and in whatever order (subset- and reorder-invariance).

Common random numbers: lengths depend only on (batch size, block), and alphas only on (quality
mode, batch size, block), so greedy and speculative decoding, every gamma and both serving modes
see the identical requests.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from src.acceptance import hazard_profile, mean_hazard
from src.config import (
    ALPHA_CLIP,
    MAX_GAMMA,
    AlphaDistribution,
    BetaAlpha,
    FixedLength,
    LengthDistribution,
    LognormalLength,
    MixtureAlpha,
    NormalAlpha,
    PerPositionAlpha,
    PointAlpha,
    UniformAlpha,
    UniformLength,
)


def _stable_int(part: object) -> int:
    digest = hashlib.sha256(repr(part).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def stream(seed: int, *key: object) -> np.random.Generator:
    """Independent generator for `key` under `seed` (PCG64 seeded through SeedSequence)."""
    return np.random.default_rng(np.random.SeedSequence([seed, *(_stable_int(k) for k in key)]))


@dataclass(frozen=True)
class Requests:
    """R independent replications of N requests each; every array is [R, N]."""

    alpha: np.ndarray  # per-token draft acceptance probability, 0 < alpha < 1
    output_len_tokens: np.ndarray  # tokens to generate (int64, >= 1)
    prompt_len_tokens: np.ndarray  # context before the first decode step (int64)
    # shape D_1..D_MAX_GAMMA of the mode's per-position acceptance (src/acceptance.py); None for
    # i.i.d. acceptance, where alpha is every position's rate. Shared by all requests.
    hazard_profile: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.alpha.shape


def sample_alpha(rng: np.random.Generator, dist: AlphaDistribution,
                 shape: tuple[int, ...]) -> np.ndarray:
    """Draw alphas; normal draws are clipped to ALPHA_CLIP so every alpha lies in (0, 1)."""
    if isinstance(dist, PointAlpha):
        out = np.full(shape, dist.value)
    elif isinstance(dist, NormalAlpha):
        out = rng.normal(dist.mean, dist.std, shape)
    elif isinstance(dist, UniformAlpha):
        out = rng.uniform(dist.low, dist.high, shape)
    elif isinstance(dist, BetaAlpha):
        out = rng.beta(dist.a, dist.b, shape)
    # alpha = exp(-s Cbar): the request's geometric-mean rate
    elif isinstance(dist, PerPositionAlpha):
        if dist.scales:
            scale = rng.choice(np.asarray(dist.scales), size=shape)
        else:
            scale = np.exp(dist.spread * rng.standard_normal(shape))
        out = np.exp(-mean_hazard(dist.rates) * scale)
    elif isinstance(dist, MixtureAlpha):
        which = rng.choice(len(dist.weights), size=shape, p=np.asarray(dist.weights))
        out = np.empty(shape)
        for i, component in enumerate(dist.components):  # draw every component, keep the chosen
            out = np.where(which == i, sample_alpha(rng, component, shape), out)
    else:
        raise TypeError(f"not an alpha distribution: {dist!r}")
    return np.clip(out, *ALPHA_CLIP)


def acceptance_profile(dist: AlphaDistribution) -> np.ndarray | None:
    """The hazard profile the engine needs for this mode (None: i.i.d. acceptance)."""
    if isinstance(dist, PerPositionAlpha):
        return hazard_profile(dist.rates, MAX_GAMMA)
    return None


def sample_lengths(rng: np.random.Generator, dist: LengthDistribution,
                   shape: tuple[int, ...]) -> np.ndarray:
    """Draw token counts (int64)."""
    if isinstance(dist, FixedLength):
        return np.full(shape, dist.tokens, dtype=np.int64)
    if isinstance(dist, UniformLength):
        return rng.integers(dist.low, dist.high, size=shape, endpoint=True, dtype=np.int64)
    if isinstance(dist, LognormalLength):
        draws = np.rint(dist.median * np.exp(dist.sigma * rng.standard_normal(shape)))
        return np.clip(draws, dist.low, dist.high).astype(np.int64)
    raise TypeError(f"not a length distribution: {dist!r}")


def make_requests(
    seed: int,
    alpha_mode: str,
    alpha_dist: AlphaDistribution,
    output_len: LengthDistribution,
    prompt_len: LengthDistribution,
    batch_size: int,
    block: int,
    replications: int,
    requests_per_replication: int,
) -> Requests:
    """Requests of replication block `block` for one (quality mode, batch size)."""
    shape = (replications, requests_per_replication)
    length_rng = stream(seed, "lengths", batch_size, block)
    output = sample_lengths(length_rng, output_len, shape)
    prompt = sample_lengths(length_rng, prompt_len, shape)
    alpha = sample_alpha(stream(seed, "alpha", alpha_mode, batch_size, block), alpha_dist, shape)
    return Requests(alpha=alpha, output_len_tokens=output, prompt_len_tokens=prompt,
                    hazard_profile=acceptance_profile(alpha_dist))


def stack_requests(parts: list[Requests]) -> Requests:
    """Stack replications along the first axis (same requests per replication and the same
    acceptance profile required)."""
    return Requests(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                      ("alpha", "output_len_tokens", "prompt_len_tokens")),
                    hazard_profile=parts[0].hazard_profile)
