"""The serving engine (src/online/engine.py): the compiled loop against the numpy engine step by
step, exactness of the numpy engine's stretch path, accounting identities, preemption, and the
checks of the serving model against the fixed-batch study."""

from dataclasses import fields, replace

import numpy as np
import pytest

from src.acceptance import hazard_profile
from src.compiled_cache import python_callable
from src.config import FixedLength
from src.costmodel import HardwareCostModel
from src.costmodel.engines import engine_profile
from src.online import counter_rng
from src.online.arrivals import ArrivalProcess, arrival_times
from src.online.counter_rng import request_keys, uniform_open_closed
from src.online.engine import (
    CompiledEngine,
    Deployment,
    Engine,
    EngineLimits,
    EngineResult,
    NumpyEngine,
    RequestTable,
    RowGroup,
    percentile_75,
)
from src.online.policies import Adaptive, BatchSchedule, FixedGamma, NoSpeculation, OffAbove
from src.online.steptime import StepTimer, kv_capacity_tokens
from src.workload import stream


def _deployments(engine="vllm-2024", kv_blocks=None, gpu="h100-sxm", scheduling="chunked"):
    """The profile's overheads with `scheduling` (the tests of chunked prefill keep vllm-2024's
    numbers but not its prefill-first scheduler)."""
    engine = replace(engine_profile(engine), prefill_scheduling=scheduling)
    spec = HardwareCostModel.from_presets(gpu, "llama-3.1-8b", draft="llama-3.2-1b", engine=engine)
    plain = HardwareCostModel.from_presets(gpu, "llama-3.1-8b", draft="ngram", engine=engine)
    out = []
    for cost, s in ((plain, False), (spec, True)):
        blocks = kv_blocks or kv_capacity_tokens(cost, 64) // 16
        out.append(Deployment(StepTimer(cost, s), blocks))
    return out


def _table(policies, reps, n, rate, prompt=(32, 400), output=(2, 200), alpha=0.7, seed=3):
    rows = []
    for _ in policies:
        for r in range(reps):
            rng = stream(seed, "t", r)
            rows.append(
                (
                    arrival_times(seed, ArrivalProcess(), rate, r, n),
                    rng.integers(*prompt, n),
                    rng.integers(*output, n),
                    np.full(n, alpha),
                    request_keys(stream(seed, "k", r), n),
                )
            )
    return RequestTable(*(np.array([row[i] for row in rows]) for i in range(5)))


def _run(policies, reps=2, n=60, rate=4.0, limits=EngineLimits(64, 2048), deps=None, **kw):
    rq = _table(policies, reps, n, rate, **kw)
    groups = [RowGroup(p, np.arange(i * reps, (i + 1) * reps)) for i, p in enumerate(policies)]
    row_dep = np.repeat([int(p.speculative) for p in policies], reps)
    deps = deps or _deployments()
    return rq, groups, deps, row_dep, limits


@pytest.mark.parametrize("scheduling", ["chunked", "prefill_first"])
def test_stretches_equal_single_steps(scheduling):
    """Advancing a row through a stretch of decode steps gives exactly what single steps give
    (same draws, same step times), for greedy and speculative rows. The single steps are the
    compiled loop's (one step at a time; equal to the numpy engine's single steps,
    test_compiled_engine_equals_the_numpy_engine_step_by_step): 0.01 s against their 1.2-1.5 s
    of CPU in numpy."""
    args = _run([NoSpeculation(), FixedGamma(3)], reps=2, n=30, rate=3.0, output=(2, 120),
                deps=_deployments(scheduling=scheduling))
    fast = Engine(*args, max_gamma=4, compiled=False).run()
    single = Engine(*args, max_gamma=4)
    assert isinstance(single, CompiledEngine)
    slow = single.run()
    assert fast.steps.sum() == slow.steps.sum()
    np.testing.assert_allclose(fast.finish_s, slow.finish_s, rtol=1e-9)
    np.testing.assert_allclose(fast.first_token_s, slow.first_token_s, rtol=1e-9)
    np.testing.assert_array_equal(fast.accepted_drafts, slow.accepted_drafts)
    np.testing.assert_allclose(fast.itl_histogram, slow.itl_histogram)


def test_every_request_completes_in_order_of_events():
    rq, *_ = args = _run([NoSpeculation(), FixedGamma(4)], reps=2, n=50, rate=8.0)
    res = Engine(*args, max_gamma=4).run()
    assert np.all(res.first_scheduled_s >= res.arrival_s - 1e-12)
    assert np.all(res.first_token_s > res.first_scheduled_s)
    assert np.all(res.finish_s >= res.first_token_s)
    # a request of one output token finishes with its prefill
    one = rq.output_tokens == 1
    np.testing.assert_array_equal(res.finish_s[one], res.first_token_s[one])
    # every step of a speculative row proposes gamma drafts per decoding sequence
    assert res.proposed_drafts[:2].sum() == 0 and res.proposed_drafts[2:].sum() > 0


def test_littles_law_holds_for_running_sequences():
    """Time-average running sequences over the makespan = request throughput x mean time from
    first scheduling to finish (an accounting identity the step loop must keep, with and without
    speculation, also across stretches)."""
    args = _run([NoSpeculation(), FixedGamma(3)], reps=3, n=80, rate=6.0)
    res = Engine(*args, max_gamma=4).run()
    lhs = res.running_integral_s / res.makespan_s
    rhs = (
        np.isfinite(res.arrival_s).sum(axis=1)
        / res.makespan_s
        * np.nanmean(res.finish_s - res.first_scheduled_s, axis=1)
    )
    assert res.preemptions.sum() == 0
    np.testing.assert_allclose(lhs, rhs, rtol=1e-9)


def test_preemption_recomputes_and_every_request_still_finishes():
    """A KV cache of 120 blocks (1,920 tokens) for up to 64 sequences of up to 600 tokens forces
    preemptions; preempted requests recompute and finish with all their tokens."""
    deps = _deployments(kv_blocks=120)
    args = _run([NoSpeculation(), FixedGamma(3)], reps=2, n=60, rate=50.0, deps=deps)
    res = Engine(*args, max_gamma=4).run()
    assert res.preemptions.sum() > 0
    assert np.isfinite(res.finish_s).all()
    assert np.all(res.finish_s >= res.first_token_s)
    # KV use never exceeds the capacity
    assert np.all(res.kv_integral_s <= res.busy_s * (1 + 1e-9))


def test_longest_request_must_fit_in_the_kv_cache():
    deps = _deployments(kv_blocks=10)
    with pytest.raises(ValueError, match="cannot hold"):
        Engine(*_run([NoSpeculation()], deps=deps), max_gamma=4)


def test_rows_do_not_depend_on_their_neighbours():
    """A replication's numbers are the same whether it runs alone or beside others
    (counter-based draws; per-row clocks)."""
    both = Engine(*_run([NoSpeculation(), FixedGamma(2)], reps=2, n=40), max_gamma=3).run()
    alone = Engine(*_run([FixedGamma(2)], reps=2, n=40), max_gamma=3).run()
    np.testing.assert_allclose(both.finish_s[2:], alone.finish_s, rtol=1e-9)


def test_fixed_lengths_give_same_requests_to_every_policy():
    rq, *_ = _run([NoSpeculation(), FixedGamma(2)], reps=2, n=10, prompt=(8, 9), output=(5, 6))
    np.testing.assert_array_equal(rq.arrival_s[:2], rq.arrival_s[2:])
    assert FixedLength(5)  # the study's length kinds are what workloads use


def test_stretch_length_percentile_is_numpys():
    """percentile_75 (the stretch length's quantile) is np.percentile(x, 75) bit for bit: the
    stretch length, and so how the steps are grouped, must not change with it."""
    rng = np.random.default_rng(5)
    for _ in range(1000):
        n = int(rng.integers(1, 40))
        x = rng.exponential(rng.uniform(0.1, 1000), n)
        if rng.random() < 0.3:
            x = np.round(x)  # ties
        if rng.random() < 0.2:
            x[rng.integers(0, n)] = np.inf
        with np.errstate(invalid="ignore"):  # inf - inf, as np.percentile meets it too
            ref, got = np.percentile(x, 75), percentile_75(x)
        np.testing.assert_array_equal(got, ref)


def test_one_decode_call_for_both_deployments_gives_the_same_numbers():
    """Rows without a draft (always at gamma 0) priced in the same call as the rows with one (the
    draft deployment's timer, whose target pass is the same) give exactly the numbers of one call
    per deployment: with prefill chunks, stretches and preemptions, under an engine that overlaps
    CPU with GPU (the branch where the draft's time enters the target pass)."""
    deps = _deployments("vllm-v1", kv_blocks=150)
    args = _run([NoSpeculation(), FixedGamma(3)], reps=2, n=20, rate=30.0, deps=deps)
    shared = Engine(*args, max_gamma=4, compiled=False)
    assert shared.decode_host == 1
    apart = Engine(*args, max_gamma=4, compiled=False)
    apart.decode_host = None
    a, b = shared.run(), apart.run()
    assert a.preemptions.sum() > 0
    for f in fields(EngineResult):
        np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


def _with_profile(args, profile):
    rq, *rest = args
    return (replace(rq, hazard_profile=profile), *rest)


def test_per_position_stretches_equal_single_steps_and_equal_steps_are_iid():
    """With a per-position hazard profile (the EAGLE scenario's rates) the stretch path still
    gives exactly what single steps give; the profile D_i = i gives the i.i.d. engine bit for
    bit; the falling rates change the outcome."""
    args = _run([NoSpeculation(), FixedGamma(4)], reps=1, n=16, rate=3.0, output=(2, 60))
    profile = hazard_profile((0.79, 0.74, 0.72, 0.73, 0.67), 4)
    pp = _with_profile(args, profile)
    fast = Engine(*pp, max_gamma=4, compiled=False).run()
    single = Engine(*pp, max_gamma=4)  # the compiled loop: single steps
    assert isinstance(single, CompiledEngine)
    slow = single.run()
    assert fast.steps.sum() == slow.steps.sum()
    np.testing.assert_array_equal(fast.accepted_drafts, slow.accepted_drafts)
    np.testing.assert_allclose(fast.finish_s, slow.finish_s, rtol=1e-9)
    iid = Engine(*args, max_gamma=4).run()
    steps = Engine(*_with_profile(args, np.arange(1.0, 5.0)), max_gamma=4).run()
    for f in fields(iid):
        np.testing.assert_array_equal(getattr(steps, f.name), getattr(iid, f.name))
    assert not np.array_equal(fast.accepted_drafts, iid.accepted_drafts)


def test_a_stretch_that_fills_the_kv_cache_stops_there_without_a_memory_error():
    """Long contexts at the GPU's real cache size: a stretch's steps past the one where the cache
    fills are cut (and preemption follows), not priced at contexts the GPU cannot hold."""
    # 16 prompts of 19.5-20.5k tokens fill most of the 326k-token cache (8B + 1B on an H100);
    # their outputs push it over while every slot is busy decoding: a stretch
    args = _run([FixedGamma(3)], reps=1, n=16, rate=1000.0, prompt=(19_500, 20_500),
                output=(800, 1200), limits=EngineLimits(16, 2048))
    res = Engine(*args, max_gamma=4).run()
    assert np.isfinite(res.finish_s).all()
    assert res.preemptions.sum() > 0


def _assert_same(a: EngineResult, b: EngineResult):
    for f in fields(EngineResult):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if np.asarray(x).dtype.kind in "iub":
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12, err_msg=f.name)


SCHEDULE = BatchSchedule(((1, 3, 4), (4, 8, 2), (9, 64, 1)), 4)
COMPILED_CASES = {
    # every policy kind the compiled loop runs, prefill chunks competing for a small budget
    "policies": dict(policies=[NoSpeculation(), FixedGamma(3), SCHEDULE, Adaptive(4),
                               OffAbove(3, 2)], n=30, rate=12.0, limits=EngineLimits(64, 512)),
    # a KV cache that forces preemption and recomputation, on an engine that overlaps CPU/GPU
    "preemption": dict(policies=[NoSpeculation(), FixedGamma(3), Adaptive(4)], n=40, rate=40.0,
                       deps=("vllm-v1", 150)),
    # attention kernels fitted on the H200 (the vllm-v1 profile's `best` kernel); 20 requests a
    # row: each numpy step prices two fitted kernels per pass (~4x a roofline step), and the
    # comparison is per step, not per request
    "fitted-kernels": dict(policies=[NoSpeculation(), FixedGamma(3), Adaptive(4)], n=20,
                           rate=10.0, deps=("vllm-v1", None, "h200")),
    # the per-position acceptance law (EAGLE's falling rates)
    "per-position": dict(policies=[FixedGamma(4), Adaptive(4)], n=20, rate=3.0,
                         profile=(0.79, 0.74, 0.72, 0.73, 0.67)),
    # vLLM v0's scheduler (vllm-2024's prefill_scheduling): whole prompts in prefill-only steps
    "prefill-first": dict(policies=[NoSpeculation(), FixedGamma(3), Adaptive(4)], n=30,
                          rate=12.0, deps=("vllm-2024", None, "h100-sxm", "prefill_first")),
    "prefill-first-preemption": dict(policies=[NoSpeculation(), FixedGamma(3), Adaptive(4)],
                                     n=24, rate=40.0,  # still ~70 preemptions
                                     deps=("vllm-2024", 150, "h100-sxm", "prefill_first")),
}


@pytest.mark.parametrize("case", COMPILED_CASES, ids=str)
def test_compiled_engine_equals_the_numpy_engine_step_by_step(case):
    """The compiled loop (src/online/engine_loop.py) gives the numpy engine's single-step numbers:
    the same steps, draws, preemptions and histograms, times to 1e-9 (the step prices agree to
    rounding, tests/test_online_step_prices.py)."""
    kw = dict(COMPILED_CASES[case])
    profile = kw.pop("profile", None)
    dep = kw.pop("deps", None)
    args = _run(kw.pop("policies"), reps=2, deps=dep and _deployments(*dep), **kw)
    if profile is not None:
        args = _with_profile(args, hazard_profile(profile, 4))
    compiled = Engine(*args, max_gamma=4)
    assert isinstance(compiled, CompiledEngine)
    a = compiled.run()
    b = Engine(*args, max_gamma=4, allow_segments=False).run()
    if case.endswith("preemption"):
        assert a.preemptions.sum() > 0
    assert a.proposed_drafts.sum() > 0
    _assert_same(a, b)


def test_the_compiled_engine_is_deterministic():
    args = _run([NoSpeculation(), FixedGamma(3), Adaptive(4)], reps=2, n=40, rate=8.0)
    a, b = Engine(*args, max_gamma=4).run(), Engine(*args, max_gamma=4).run()
    for f in fields(EngineResult):
        np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name), err_msg=f.name)


class _SlotReader:
    """A policy reading the slots that is not `adaptive`: the compiled loop cannot run it."""

    name = "slot-reader"
    reads_slot_state = True
    speculative = True

    def gammas(self, view):
        return np.where(view.context.max(axis=1) > 300, 1, 3)


def test_policies_without_a_compiled_form_run_in_numpy():
    args = _run([NoSpeculation(), _SlotReader()], reps=1, n=20, rate=4.0)
    engine = Engine(*args, max_gamma=4)
    assert isinstance(engine, NumpyEngine)
    assert engine.run().proposed_drafts[1] > 0
    with pytest.raises(ValueError, match="compiled engine runs"):
        Engine(*args, max_gamma=4, compiled=True)


def test_compiled_uniforms_are_the_numpy_ones():
    rng = np.random.default_rng(2)
    keys = request_keys(rng, 2000)
    counters = rng.integers(0, 10**9, 2000)
    ref = uniform_open_closed(keys, counters)
    uniform_one = python_callable(counter_rng.uniform_one)
    got = np.array([uniform_one(k, int(c)) for k, c in zip(keys, counters)])
    np.testing.assert_array_equal(got, ref)


def _step_compositions(scheduling, monkeypatch):
    """(decoding sequences, prompt chunks, chunks completing their prompt) of every numpy step."""
    seen = []
    original = NumpyEngine._step_ms

    def spy(self, rows, n_dec, dec_ctx, gamma, width, masks, pf_sums=None):
        seen.extend(zip(n_dec, pf_sums[0], pf_sums[3]))
        return original(self, rows, n_dec, dec_ctx, gamma, width, masks, pf_sums)

    monkeypatch.setattr(NumpyEngine, "_step_ms", spy)
    args = _run([NoSpeculation(), FixedGamma(3)], n=15, rate=12.0,
                deps=_deployments(scheduling=scheduling))
    res = Engine(*args, max_gamma=4, allow_segments=False).run()
    assert np.isfinite(res.finish_s[np.isfinite(res.arrival_s)]).all()
    return np.array(seen)


def test_a_prefill_first_step_never_mixes_prompts_with_decoding(monkeypatch):
    """vLLM v0 without chunked prefill: a step with a waiting prompt that fits is a prefill-only
    step of whole prompts (the running sequences wait), else a decode step; chunked prefill
    (vLLM V1) mixes them."""
    steps = _step_compositions("prefill_first", monkeypatch)
    n_dec, chunks, complete = steps.T
    assert not np.any((n_dec > 0) & (chunks > 0))
    np.testing.assert_array_equal(chunks, complete)  # every prompt whole, in one step
    assert np.any(chunks > 1) and np.any(n_dec > 0)
    mixed = _step_compositions("chunked", monkeypatch)
    assert np.any((mixed[:, 0] > 0) & (mixed[:, 1] > 0))


def test_prefill_first_needs_a_token_budget_for_the_longest_request():
    args = _run([NoSpeculation()], limits=EngineLimits(64, 512),
                deps=_deployments(scheduling="prefill_first"))
    for compiled in (True, False):
        with pytest.raises(ValueError, match="max_num_batched_tokens >= the longest"):
            Engine(*args, max_gamma=4, compiled=compiled)
