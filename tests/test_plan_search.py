"""The capacity search (src/plan/search.py) against a dense rate sweep, and monotone in the SLO.

The algorithm (bracket_and_bisect) on predicates with a known cliff, then the whole search on one
small case of serve's engine: Llama-3.1-8B on an L4 (low capacity, so few requests per probe),
alpaca lengths, no speculation, 100 s windows (steady without longer reruns), 2 replications. Its
engine runs are shared between tasks that differ only in the SLO (which classifies a run; it does
not change it).
"""
import math
from dataclasses import replace

import numpy as np
import pytest

from src.plan.search import (
    Deployment,
    SearchTask,
    bracket_and_bisect,
    capacity_gain,
    capacity_search,
    dense_capacity,
    midpoint,
)

DEP = Deployment("l4", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "alpaca")
TASK = SearchTask(DEP, "none", slo_ttft_s=2.0, slo_tpot_s=0.1, slo_attainment_target=0.9,
                  alpha=0.7, quality_mode=None, duration_s=100.0, replications=2, tolerance=0.25,
                  start_rate_per_s=16.0, seed=7, max_gamma=8)


@pytest.mark.parametrize("tolerance", [0.02, 0.1, 0.3])
def test_bisection_finds_the_cliff_a_dense_sweep_finds(tolerance):
    """For cliffs c over four decades (meet(r) <=> r < c): the bracket holds c and is as narrow
    as asked, and a dense sweep (1% steps) by the same rule lands within one tolerance of it."""
    dense_rates = 0.01 * 1.01 ** np.arange(1400)
    for c in np.exp(np.random.default_rng(3).uniform(np.log(0.05), np.log(3000), 200)):
        probed = []

        def meet(r, c=c):
            probed.append(r)
            return r < c
        bound, lo, hi = bracket_and_bisect(meet, 4.0, tolerance)
        assert bound == "found" and lo < c <= hi and hi / lo <= 1 + tolerance + 1e-12
        dense = dense_rates[dense_rates < c].max()
        assert 1 / (1 + tolerance) < lo / dense < 1.01
        assert len(probed) == len(set(probed)) <= 30


def test_bisection_is_monotone_in_the_predicate():
    """A looser SLO meets at least every rate a tighter one does; with cliffs c1 <= c2 the
    capacities come out in the same order, including where both lie in one tolerance step."""
    for c1, c2 in [(10.0, 10.5), (10.0, 11.0), (3.3, 300.0), (7.0, 7.0), (0.3, 0.31)]:
        lo1 = bracket_and_bisect(lambda r: r < c1, 4.0, 0.1)[1]
        lo2 = bracket_and_bisect(lambda r: r < c2, 4.0, 0.1)[1]
        assert lo1 <= lo2


def test_bisection_bounds():
    assert bracket_and_bisect(lambda r: True, 4.0, 0.1, max_rate=100.0) == ("above", 64.0, None)
    assert bracket_and_bisect(lambda r: False, 4.0, 0.1, halvings=3) == ("below", None, 0.5)


@pytest.fixture(scope="module")
def runs():
    return {}


@pytest.fixture(scope="module")
def searched(runs):
    return capacity_search(TASK, runs)


def test_search_brackets_within_tolerance(searched):
    assert searched["bound"] == "found"
    lo, hi = searched["capacity_per_s"], searched["first_miss_per_s"]
    assert 0 < lo < hi <= lo * (1 + TASK.tolerance) * (1 + 1e-12)
    probes = {p["rate_per_s"]: p for p in searched["probes"]}
    assert probes[lo]["meet"] and probes[lo]["steady"]
    assert not probes[hi]["meet"]
    assert searched["at_capacity"]["rate_per_s"] == lo


def test_search_agrees_with_a_dense_sweep(searched, runs):
    """A dense sweep (10% steps from below the bracket) by the same rule finds the cliff the
    search brackets: the search's last meet and the dense one differ by less than a tolerance
    step (either may sit anywhere in its own bracket below the cliff)."""
    lo = searched["capacity_per_s"]
    rates = [round(lo / 1.1 * 1.1 ** k, 3) for k in range(4)]  # 10% steps across the bracket
    dense = dense_capacity(TASK, rates, runs)
    assert dense > rates[0]  # the sweep started below capacity and crossed it
    assert dense < rates[-1]
    assert 1 / (1 + TASK.tolerance) < lo / dense < 1.1 * (1 + 1e-9)


def test_capacity_is_monotone_in_the_slo(searched, runs):
    """A looser SLO never gives a lower capacity (TPOT 100 ms < 150 ms)."""
    loose = capacity_search(replace(TASK, slo_tpot_s=0.15), runs)["capacity_per_s"]
    assert searched["capacity_per_s"] < loose  # TPOT binds here: the SLO moves the capacity


def test_missed_at_every_rate_is_capacity_zero(runs):
    """TPOT 50 ms is below the L4's batch-1 step time for an 8B model (about 62 ms in this
    model): no rate meets it, the search halves down and reports 'below' (a miss counts however
    short the window, so 10 s windows do)."""
    r = capacity_search(replace(TASK, slo_tpot_s=0.05, duration_s=10.0))
    assert r["bound"] == "below" and r["capacity_per_s"] == 0.0
    assert r["first_miss_per_s"] == pytest.approx(TASK.start_rate_per_s / 2 ** 8)


def test_midpoint_is_geometric_and_printable():
    assert midpoint(16.0, 32.0) == 22.63
    assert 16.0 < midpoint(16.0, 16.001) < 16.001
    assert midpoint(1.0, 1.0001) not in (1.0, 1.0001)


def test_capacity_gain_and_its_range():
    pol = {"capacity_per_s": 30.0, "first_miss_per_s": 33.0}
    none = {"capacity_per_s": 20.0, "first_miss_per_s": 22.0}
    gain, low, high = capacity_gain(pol, none)
    assert (gain, low, high) == pytest.approx((1.5, 30 / 22, 33 / 20))
    assert all(math.isnan(x) for x in capacity_gain(pol, {"capacity_per_s": 0.0,
                                                          "first_miss_per_s": 0.1}))


def test_a_meet_not_steady_at_the_longest_window_is_unknown_not_a_miss():
    """1 s windows (the longest probe window 20 s) hold too few of alpaca's E2E latencies on an L4
    for any rate to be steady, yet every rate meets the SLO: the search says "unknown" (serve's
    S5 does too), never a miss, and names the window that would do."""
    r = capacity_search(replace(TASK, duration_s=1.0))
    assert r["bound"] == "unknown" and r["capacity_per_s"] == 0.0
    assert math.isnan(r["first_miss_per_s"])  # no probe missed the SLO
    assert all(p["attained"] and p["verdict"] == "unknown" for p in r["probes"])
    assert max(p["window_s"] for p in r["probes"]) == 20.0
    assert r["unknown_per_s"] == min(p["rate_per_s"] for p in r["probes"])
    assert r["window_to_steady_s"] > 20.0


def test_the_readme_example_finds_the_l40s_capacity():
    """The README's plan example: Llama-3.1-8B on an L40S, sharegpt, TTFT 2 s / TPOT 50 ms, no
    speculation. sharegpt's mean E2E there is 8-15 s, so a steady window is 200-400 s: the
    probes lengthen to it, and the capacity (9.5/s) is the cliff serve shows (it meets the SLO
    at 10/s and misses at 16/s over 60 s windows), not 0.39/s (a meet cut off at 180 s)."""
    task = SearchTask(replace(DEP, gpu="l40s", workload="sharegpt"), "none", 2.0, 0.05, 0.9,
                      None, None, 30.0, 2, 0.1, 4.0, 20261129, 8)
    r = capacity_search(task)
    assert r["bound"] == "found" and 8.0 < r["capacity_per_s"] < 12.0
    probes = {p["rate_per_s"]: p for p in r["probes"]}
    assert probes[r["first_miss_per_s"]]["slo_attainment"] < 0.9  # a real miss
    assert probes[r["capacity_per_s"]]["steady"]
    # every throughput's and latency's interval stays above zero (R = 2: t = 12.7)
    for p in r["probes"]:
        for key in ("sustained_output_tok_s", "output_throughput_tok_s",
                    "request_throughput_req_s", "ttft_p99_s", "e2e_mean_s"):
            assert 0 < p[f"{key}_ci_low"] <= p[key] <= p[f"{key}_ci_high"], key
        assert 0 <= p["slo_attainment_ci_low"] <= p["slo_attainment_ci_high"] <= 1


def test_a_positive_interval_on_the_log_scale():
    """mean x exp(-+ t sd(log v) / sqrt(R)): positive however wide, and the Student-t interval
    to first order where the spread is small."""
    from src.online.metrics import mean_ci, mean_ci_positive

    m, lo, hi = mean_ci_positive(np.array([100.0, 3000.0]), 0.95)
    assert m == 1550.0 and 0 < lo < m < hi
    assert mean_ci(np.array([100.0, 3000.0]), 0.95)[1] < 0  # the linear one goes below zero
    narrow = np.array([1000.0, 1001.0, 999.5, 1000.4])
    assert mean_ci_positive(narrow, 0.95) == pytest.approx(mean_ci(narrow, 0.95), rel=1e-6)
    assert mean_ci_positive(np.array([0.0, 2.0]), 0.95)[1] == 0.0  # a zero: clipped at 0


def test_a_chunk_of_memory_checks_reads_the_presets_once(monkeypatch):
    """fit_checks (plan's memory checks, one executor call per chunk) loads the presets and the
    engine profiles once for the chunk, not ~4 times a check; the answers are fit_check's."""
    import src.costmodel.content_cache as content_cache
    import src.costmodel.engines as engines
    import src.costmodel.presets as presets
    from src.plan.search import fit_check, fit_checks

    tasks = [replace(TASK, deployment=replace(DEP, gpu=g)) for g in ("l4", "a40", "l40s")] * 4
    expected = [fit_check(t) for t in tasks]
    loads = []
    for module, name in ((presets, "_load_presets"), (engines, "_load_engine_profiles")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name, **k:
                            loads.append(name) or real(*a, **k))
    monkeypatch.setattr(content_cache, "_BY_CONTENT", {})  # no parse kept from before
    assert fit_checks(tasks) == expected
    assert loads.count("_load_presets") == 1 and loads.count("_load_engine_profiles") <= 2
    loads.clear()
    monkeypatch.setattr(content_cache, "_BY_CONTENT", {})
    with presets.memo_presets():  # memo_presets alone, without the content cache: one load
        fit_check(tasks[0])
        fit_check(tasks[1])
    assert loads.count("_load_presets") == 1


def test_presets_are_parsed_once_per_content_and_each_call_gets_its_own_tables(tmp_path):
    """load_presets / load_engine_profiles parse and check the files once per content of them
    (presets.by_content): unchanged files are not parsed again, an edited one is; the tables a
    call returns are its own (a model added to one is not in the next)."""
    import src.costmodel.content_cache as content_cache
    import src.costmodel.presets as presets
    from src.costmodel.engines import load_engine_profiles

    extra = tmp_path / "extra.toml"
    extra.write_text('[gpus.l4]\nmemory_bandwidth_gb_per_s = 200\n')
    loads = []
    real = presets._load_presets
    content_cache._BY_CONTENT.clear()
    try:
        presets._load_presets = lambda paths: loads.append(paths) or real(paths)
        first = presets.load_presets([extra])
        second = presets.load_presets([extra])
        assert len(loads) == 1 and first.gpu("l4") == second.gpu("l4")
        assert first.gpu("l4").memory_bandwidth_gb_per_s == 200
        first.models["added"] = first.models["llama-3.1-8b"]
        assert "added" not in dict(second.models) and "added" not in dict(
            presets.load_presets([extra]).models)
        extra.write_text('[gpus.l4]\nmemory_bandwidth_gb_per_s = 300\n')
        assert presets.load_presets([extra]).gpu("l4").memory_bandwidth_gb_per_s == 300
        assert len(loads) == 2
        extra.write_text('[engines.vllm-v1]\nstep_cpu_fixed_ms = 7.5\n')
        assert load_engine_profiles(extra_paths=[extra])["vllm-v1"].step_cpu_fixed_ms == 7.5
        extra.write_text('[engines.vllm-v1]\nstep_cpu_fixed_ms = 8.5\n')
        assert load_engine_profiles(extra_paths=[extra])["vllm-v1"].step_cpu_fixed_ms == 8.5
    finally:
        presets._load_presets = real
        content_cache._BY_CONTENT.clear()


def test_probes_run_at_the_engines_own_limits_on_the_gpu():
    """plan's probes use the limits serve defaults to (src/online/engine_limits.py): vLLM V1
    on an L40S (48 GB, under 70 GiB) is 256 requests / 2048 tokens (EngineArgs.get_batch_defaults),
    on an H100 1024 / 8192; SGLang on an H100 chunked_prefill_size 8192."""
    from src.plan.search import serve_config
    limits = serve_config(replace(TASK, deployment=replace(DEP, gpu="l40s"))).limits
    assert (limits.max_num_seqs, limits.max_num_batched_tokens) == (256, 2048)
    limits = serve_config(replace(TASK, deployment=replace(DEP, gpu="h100-sxm"))).limits
    assert (limits.max_num_seqs, limits.max_num_batched_tokens) == (1024, 8192)
    limits = serve_config(replace(TASK, deployment=replace(DEP, gpu="h100-sxm",
                                                           engine="sglang"))).limits
    assert limits.max_num_batched_tokens == 8192
