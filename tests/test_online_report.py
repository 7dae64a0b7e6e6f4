"""The serving summary's rules on synthetic tables: steady state, SLO capacity, the fixed policies
the hindsight best is taken over."""

from types import SimpleNamespace

import numpy as np
import pandas as pd

from src.online.policies import BatchSchedule
from src.online.report import (
    STEADY_WINDOW_E2E,
    arrival_window_s,
    capacity_text,
    fixed_policies_label,
    schedule_gammas_not_run,
    slo_capacity,
    steady_flags,
    with_steadiness,
)

RATES = [1.0, 2.0, 4.0, 8.0]


def table(attainment, e2e_mean_s=(1.0, 1.0, 1.0, 1.0), policy="none"):
    return pd.DataFrame({"policy": policy, "rate_per_s": RATES,
                         "slo_attainment": attainment, "e2e_mean_s": e2e_mean_s})


def test_arrival_window_is_the_duration_or_requests_over_rate():
    by_requests = SimpleNamespace(duration_s=None, trace=None, requests_per_replication=1000)
    by_duration = SimpleNamespace(duration_s=60.0, trace=None, requests_per_replication=None)
    assert arrival_window_s(by_requests, 64) == 1000 / 64
    assert arrival_window_s(by_duration, 64) == 60.0


def test_a_rate_is_steady_when_its_window_holds_k_mean_e2e_latencies():
    t = table([1, 1, 1, 1], e2e_mean_s=[1.0, 2.0, 5.0, 7.0])
    flags = steady_flags(t, {r: 100.0 for r in RATES})
    # 100 s holds 20 latencies of 5 s (the boundary counts), not of 7 s
    assert STEADY_WINDOW_E2E == 20
    assert flags.tolist() == [True, True, True, False]
    # a fixed number of requests: the window shrinks with the rate, 200 requests at 8/s is a burst
    cfg = SimpleNamespace(duration_s=None, trace=None, requests_per_replication=200)
    t2 = with_steadiness(t, cfg)
    assert t2.arrival_window_s.tolist() == [200, 100, 50, 25]
    assert t2.steady_state.tolist() == [True, True, False, False]


def test_capacity_interpolates_between_the_last_meet_and_the_first_miss():
    t = table([1.0, 0.95, 0.85, 0.5])
    kind, rate, miss = slo_capacity(t, "none", 0.9)
    assert kind == "between" and miss == 4.0
    assert np.isclose(rate, 2 * 2 ** 0.5)  # halfway from 0.95 to 0.85 in log rate
    assert capacity_text(kind, rate, miss, 8.0) == "2.83/s"


def test_capacity_missed_at_every_rate_says_so_not_zero():
    t = table([0.5, 0.4, 0.3, 0.2])
    kind, rate, miss = slo_capacity(t, "none", 0.9)
    assert (kind, rate) == ("below", 1.0)
    assert capacity_text(kind, rate, miss, 8.0) == "< 1/s (missed at every rate)"


def test_a_meet_counts_only_where_steady_a_miss_counts_anywhere():
    t = table([1.0, 1.0, 1.0, 1.0])
    all_steady = pd.Series(True, index=t.index)
    assert capacity_text(*slo_capacity(t, "none", 0.9, all_steady), 8.0) == (
        "> 8/s (met at every rate)")
    # the top two rates are bursts: their meets say nothing about sustained load
    steady = pd.Series([True, True, False, False], index=t.index)
    kind, rate, miss = slo_capacity(t, "none", 0.9, steady)
    assert (kind, rate) == ("above", 2.0)
    assert capacity_text(kind, rate, miss, 8.0).startswith(">= 2/s (the highest steady rate")
    # a miss in a non-steady rate still bounds the capacity from above
    t = table([1.0, 1.0, 1.0, 0.5])
    kind, rate, miss = slo_capacity(t, "none", 0.9, steady)
    assert (kind, rate, miss) == ("above", 2.0, 8.0)
    assert "first miss at 8/s" in capacity_text(kind, rate, miss, 8.0)
    # the rate before the first miss steady: interpolate as without the rule
    steady = pd.Series([True, True, True, False], index=t.index)
    assert slo_capacity(t, "none", 0.9, steady)[0] == "between"


def test_hindsight_label_lists_the_fixed_policies_run():
    policies = ["none", "fixed:2", "fixed:5", "schedule", "adaptive"]
    label = "best of the fixed policies run: none, fixed:2, fixed:5"
    assert fixed_policies_label(policies) == label
    prep = SimpleNamespace(schedule=BatchSchedule(((1, 3, 5), (4, 28, 4), (29, 1024, 2)), 5))
    assert schedule_gammas_not_run(prep, policies) == [4]
    assert schedule_gammas_not_run(prep, policies + ["fixed:4"]) == []


def test_serve_marks_a_burst_and_names_what_the_hindsight_best_is_over(tmp_path):
    """30 requests at 64/s arrive in half a second: a burst, marked in the CSV and in S1."""
    import run as run_py

    code = run_py.main(["serve", "--rates", "0.5,64", "--requests", "30", "--replications", "2",
                        "--policies", "none,fixed:2,schedule", "--workers", "1", "--no-plots",
                        "--quiet", "--out", str(tmp_path)])
    assert code == 0
    t = pd.read_csv(tmp_path / "results" / "serving.csv")
    steady = t.groupby("rate_per_s").steady_state.all()
    assert steady[0.5] and not steady[64]
    assert (t.arrival_window_s == 30 / t.rate_per_s).all()
    text = (tmp_path / "results" / "summary.txt").read_text()
    s1 = text.split("S1.")[1].split("S2.")[0]
    none_row = [line for line in s1.splitlines() if line.strip().startswith("none")][0]
    assert none_row.rstrip().endswith("*") and none_row.count("*") == 1
    assert "best of the fixed policies run: none, fixed:2" in text
    assert "the schedule runs gamma" in text  # it uses gammas other than 2
