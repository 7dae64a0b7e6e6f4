"""The capacity search (src/plan/search.py) against a dense rate sweep, and monotone in the SLO.

One small case: Llama-3.1-8B on an L4 (low capacity, so few requests per probe), alpaca lengths,
no speculation, 100 s windows (steady without longer reruns), 2 replications. The engine runs are
shared between the tasks (they differ only in the SLO, which classifies a run, not changes it).
"""
import math
from dataclasses import replace

import pytest

from src.plan.search import (
    Deployment,
    SearchTask,
    capacity_gain,
    capacity_search,
    dense_capacity,
    midpoint,
)

DEP = Deployment("l4", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "alpaca")
TASK = SearchTask(DEP, "none", slo_ttft_s=2.0, slo_tpot_s=0.1, slo_attainment_target=0.9,
                  alpha=0.7, quality_mode=None, duration_s=100.0, replications=2, tolerance=0.2,
                  start_rate_per_s=8.0, seed=7, max_gamma=8)


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
    """A dense sweep (steps of 8%, from well below) by the same rule finds the cliff the search
    brackets: the search's last meet and the dense one differ by less than a tolerance step
    (either may sit anywhere in its own bracket below the cliff)."""
    lo = searched["capacity_per_s"]
    rates = [round(lo / 1.2 * 1.08 ** k, 3) for k in range(6)]
    dense = dense_capacity(TASK, rates, runs)
    assert dense > rates[0]  # the sweep started below capacity and crossed it
    assert dense < rates[-1]
    assert 1 / (1 + TASK.tolerance) < lo / dense < 1.08 * (1 + 1e-9)


def test_capacity_is_monotone_in_the_slo(searched, runs):
    """A looser SLO never gives a lower capacity (TPOT 80 ms < 100 ms < 150 ms)."""
    tight = capacity_search(replace(TASK, slo_tpot_s=0.08), runs)["capacity_per_s"]
    loose = capacity_search(replace(TASK, slo_tpot_s=0.15), runs)["capacity_per_s"]
    assert tight <= searched["capacity_per_s"] <= loose
    assert tight < loose  # TPOT binds here: the SLO moves the capacity


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
