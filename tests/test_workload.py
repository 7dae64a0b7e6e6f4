"""src/workload.py: alpha and length distributions, keyed random streams."""
import numpy as np
import pytest

from src.config import (
    BetaAlpha,
    FixedLength,
    LognormalLength,
    MixtureAlpha,
    NormalAlpha,
    PointAlpha,
    UniformAlpha,
    UniformLength,
)
from src.workload import make_requests, sample_alpha, sample_lengths, stream


def test_alpha_distributions_have_their_means_and_stay_in_the_open_interval():
    rng = np.random.default_rng(0)
    n = 200_000
    cases = [
        (PointAlpha(0.7), 0.7),
        (NormalAlpha(0.85, 0.02), 0.85),
        (UniformAlpha(0.45, 0.85), 0.65),
        (BetaAlpha(8, 2), 0.8),
        (MixtureAlpha((0.25, 0.75), (PointAlpha(0.9), PointAlpha(0.5))), 0.6),
    ]
    for dist, mean in cases:
        a = sample_alpha(rng, dist, (n,))
        assert 0 < a.min() and a.max() < 1
        assert a.mean() == pytest.approx(mean, abs=0.005), dist
    wide = sample_alpha(rng, NormalAlpha(0.98, 0.2), (n,))
    assert 0 < wide.min() and wide.max() < 1  # clipped, never 0 or 1


def test_mixture_weights_are_respected():
    a = sample_alpha(np.random.default_rng(3),
                     MixtureAlpha((0.3, 0.7), (PointAlpha(0.9), PointAlpha(0.4))), (100_000,))
    assert np.mean(a == 0.9) == pytest.approx(0.3, abs=0.01)


def test_lengths_respect_their_bounds():
    rng = np.random.default_rng(0)
    assert np.all(sample_lengths(rng, FixedLength(17), (10,)) == 17)
    u = sample_lengths(rng, UniformLength(64, 256), (100_000,))
    assert u.min() == 64 and u.max() == 256 and u.dtype == np.int64
    ln = sample_lengths(rng, LognormalLength(200, 0.8, 16, 1024), (100_000,))
    assert ln.min() >= 16 and ln.max() <= 1024
    assert np.median(ln) == pytest.approx(200, rel=0.05)


def test_streams_are_keyed_not_sequential():
    a = stream(7, "accept", "mode", 4).random(5)
    b = stream(7, "accept", "mode", 4).random(5)
    c = stream(7, "accept", "mode", 8).random(5)
    d = stream(8, "accept", "mode", 4).random(5)
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(a, d)


def test_lengths_are_common_to_all_quality_modes():
    args = (UniformLength(64, 256), UniformLength(1024, 2048), 4, 0, 16, 16)
    good = make_requests(1, "good", PointAlpha(0.9), *args)
    poor = make_requests(1, "poor", PointAlpha(0.4), *args)
    assert np.array_equal(good.output_len_tokens, poor.output_len_tokens)
    assert np.array_equal(good.prompt_len_tokens, poor.prompt_len_tokens)


def test_per_position_requests_carry_the_profile_and_their_scaled_rate():
    """alpha = exp(-s Cbar) with ln s ~ N(0, spread): the median request has the mode's rates."""
    from src.acceptance import mean_hazard
    from src.config import PerPositionAlpha
    rates = (0.85, 0.7, 0.6)
    req = make_requests(3, "pp", PerPositionAlpha(rates, spread=0.3), FixedLength(10),
                        FixedLength(10),
                        4, 0, 500, 40)
    assert req.hazard_profile is not None and req.hazard_profile.size == 64
    log_scale = np.log(-np.log(req.alpha) / mean_hazard(rates))
    assert abs(np.median(log_scale)) < 0.02 and log_scale.std() == pytest.approx(0.3, rel=0.03)
    iid = make_requests(3, "m", PerPositionAlpha((0.7,)), FixedLength(10), FixedLength(10), 4, 0, 2,
                        3)
    assert iid.hazard_profile is None and np.allclose(iid.alpha, 0.7)
