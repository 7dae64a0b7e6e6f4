"""Speculation policies (src/online/policies.py): vLLM's schedule semantics, parsing, adaptive."""
import numpy as np
import pytest

from src.acceptance import (
    expected_tokens_per_step,
    expected_tokens_per_step_per_position,
    hazard_profile,
    mean_hazard,
)
from src.config import ConfigError
from src.costmodel import HardwareCostModel
from src.online.engine import PolicyView
from src.online.policies import (
    Adaptive,
    BatchSchedule,
    FixedGamma,
    NoSpeculation,
    OffAbove,
    compress_schedule,
    parse_policies,
    parse_schedule_json,
    steady_state_gammas,
)
from src.online.steptime import StepTimer


def test_schedule_lookup_follows_vllm():
    """vLLM's build_dynamic_sd_schedule_lookup: gaps take the previous K, the tail the last K,
    every K capped at num_speculative_tokens (its own worked example: [(1,16,4),(32,128,2)])."""
    dense = BatchSchedule(((1, 16, 4), (32, 128, 2)), 3).lookup(200)
    assert dense[1] == dense[16] == 3  # capped at num_speculative_tokens
    assert dense[17] == dense[31] == 3  # the gap carries the previous K
    assert dense[32] == dense[128] == dense[200] == 2


def test_schedule_json_rules_and_round_trip():
    s = parse_schedule_json('{"num_speculative_tokens": 3, '
                            '"num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 64, 0]]}')
    assert s.ranges == ((1, 8, 3), (9, 64, 0)) and s.num_speculative_tokens == 3
    for bad in ("[[2, 8, 3]]", "[[1, 8, 3], [8, 9, 1]]", "[[1, 8, -1]]", "[[1, 8]]", "{}",
                '{"num_speculative_tokens": 0, "num_speculative_tokens_per_batch_size": [[1,2,0]]}',
                "not json"):
        with pytest.raises(ConfigError):
            parse_schedule_json(bad)
    gammas = np.array([0, 4, 4, 3, 3, 3, 0, 0])
    s = compress_schedule(gammas)
    assert s.ranges == ((1, 2, 4), (3, 5, 3), (6, 7, 0)) and s.num_speculative_tokens == 4
    np.testing.assert_array_equal(s.lookup(7)[1:], gammas[1:])


def test_parse_policies():
    sched = BatchSchedule(((1, 1, 1),), 1)
    names = [p.name for p in parse_policies("none,fixed,fixed:2,schedule,adaptive,off-above,"
                                            "off-above:16:3", 4, 8, sched, 32)]
    assert names == ["none", "fixed:4", "fixed:2", "schedule", "adaptive", "off-above:32",
                     "off-above:16"]
    for bad in ("magic", "fixed:0", "fixed:99", "none,none", "off-above:x", ""):
        with pytest.raises(ConfigError):
            parse_policies(bad, 4, 8, sched, 32)


def _view(batch, alpha_acc, tested, engine="vllm-v1"):
    cost = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="llama-3.2-1b",
                                          engine=engine)
    W = 256
    dec = np.arange(W)[None, :] < np.array(batch)[:, None]
    r = len(batch)
    return PolicyView(batch=np.array(batch), decoding=dec, context=np.full((r, W), 600),
                      accepted=np.full((r, W), alpha_acc), tested=np.full((r, W), tested),
                      pooled_accepted=np.zeros(r), pooled_tested=np.zeros(r),
                      timer=StepTimer(cost, True), max_gamma=8)


def test_adaptive_speculates_deep_when_acceptance_is_high_and_not_when_it_is_low():
    p = Adaptive(max_gamma=8)
    high = p.gammas(_view([1], 900, 1000))  # observed acceptance 0.9 at batch 1
    low = p.gammas(_view([1], 50, 1000))  # 0.05
    assert high[0] >= 4 and low[0] == 0


def test_adaptive_turns_speculation_down_as_the_batch_grows_under_a_costly_engine():
    g = Adaptive(max_gamma=8).gammas(_view([1, 256], 700, 1000, engine="vllm-2024"))
    assert g[0] > g[1]


def test_off_above_and_fixed():
    view = _view([4, 40], 0, 0)
    np.testing.assert_array_equal(OffAbove(16, 3).gammas(view), [3, 0])
    np.testing.assert_array_equal(FixedGamma(2).gammas(view), [2, 2])


def test_batch_size_policies_need_no_slot_state():
    """Policies that declare reads_slot_state = False get views without the slots' contexts and
    acceptance counts (the engine skips copying them) and decide the same."""
    full = _view([1, 4, 40, 200], 0, 0)
    bare = PolicyView(batch=full.batch, decoding=full.decoding, context=None, accepted=None,
                      tested=None, pooled_accepted=None, pooled_tested=None, timer=full.timer,
                      max_gamma=8)
    sched = BatchSchedule(((1, 8, 4), (9, 64, 2)), 4)
    for policy in (NoSpeculation(), FixedGamma(3), OffAbove(16, 3), sched):
        assert not policy.reads_slot_state
        np.testing.assert_array_equal(policy.gammas(bare), policy.gammas(full))
    assert Adaptive(max_gamma=8).reads_slot_state


def test_adaptive_weighs_gammas_the_kv_cache_cannot_hold_without_failing():
    """On an L40S with its KV cache full (a burst of long scenario requests), the adaptive policy
    weighs gamma 8 for every running sequence, more lookahead than memory holds: that is a
    hypothetical price, not a step; the engine preempts for the gamma it picks. (It raised the
    cost model's out-of-memory error mid-run.)"""
    from src.online.cli import config_from_args, make_parser
    from src.online.study import run_serving
    cfg = config_from_args(make_parser().parse_args(
        ["--scenario", "configs/scenarios/l40s-llama8b-1b.toml", "--workload", "scenario",
         "--rates", "80", "--requests", "150", "--replications", "2", "--policies",
         "none,adaptive"]))
    t = run_serving(cfg, workers=1)["table"]
    assert list(t.policy) == ["none", "adaptive"]
    assert (t.preemptions_per_request > 0).any()  # the cache really was full


def test_steady_state_gammas_price_a_per_position_mode_with_its_closed_form():
    """The default gamma and schedule of a per-position mode: speedups use E[K + 1] = 1 + sum_{i
    <= g} prod_{j <= i} a_j (src/acceptance.py); the profile D_i = i gives the i.i.d. numbers
    (to rounding)."""
    cost = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="llama-3.2-1b",
                                          engine="vllm-v1")
    plain = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", draft="ngram",
                                           engine="vllm-v1")
    spec, greedy = StepTimer(cost, True), StepTimer(plain, False)
    rates = (0.79, 0.74, 0.72, 0.73, 0.67)
    alpha = np.array([np.exp(-mean_hazard(rates))])  # one request with exactly these rates
    iid = steady_state_gammas(spec, greedy, alpha, 600.0, 16, 6)
    same = steady_state_gammas(spec, greedy, alpha, 600.0, 16, 6,
                               hazard_profile=np.arange(1.0, 7.0))
    np.testing.assert_array_equal(iid[0], same[0])  # the same best gammas
    for a, b in zip(iid[1:], same[1:]):  # sum of alpha^i vs the geometric series' closed form
        np.testing.assert_allclose(a, b, rtol=1e-12)
    _, _, by_gamma = steady_state_gammas(spec, greedy, alpha, 600.0, 16, 6,
                                         hazard_profile=hazard_profile(rates, 6))
    for g in range(1, 7):  # the ratio of the two laws' E[K + 1] at every batch size
        ratio = (expected_tokens_per_step_per_position(rates, g)
                 / expected_tokens_per_step(alpha[0], g))
        np.testing.assert_allclose(by_gamma[g, 1:] / iid[2][g, 1:], ratio, rtol=1e-12)
