"""The serving summary's rules on synthetic tables: steady state, SLO capacity, the fixed policies
the hindsight best is taken over."""

from types import SimpleNamespace

import numpy as np
import pandas as pd

from src.online.policies import BatchSchedule
from src.online.report import fixed_policies_label, schedule_gammas_not_run, summary_section
from src.online.serving_rules import (
    MAX_INTERPOLATION_RATIO,
    STEADY_WINDOW_E2E,
    arrival_window_s,
    capacity_text,
    duration_to_steady_s,
    rate_label,
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
    t = table([1.0, 0.95, 0.85, 0.5])  # rates a factor 2 apart: allow that gap here
    kind, rate, miss = slo_capacity(t, "none", 0.9, max_ratio=2.0)
    assert kind == "between" and miss == 4.0
    assert np.isclose(rate, 2 * 2 ** 0.5)  # halfway from 0.95 to 0.85 in log rate
    assert capacity_text(kind, rate, miss, 8.0) == "2.8/s"


def test_capacity_is_a_bracket_across_a_wide_gap_or_a_non_steady_miss():
    """32/s met, 64/s missed: an interpolated 35.14/s would only say how overloaded 64/s got."""
    t = pd.DataFrame({"policy": "none", "rate_per_s": [16.0, 32.0, 64.0],
                      "slo_attainment": [1.0, 0.99, 0.2], "e2e_mean_s": [1.0, 1.0, 1.0]})
    steady = pd.Series([True, True, False], index=t.index)
    kind, rate, miss = slo_capacity(t, "none", 0.9, steady)
    assert (kind, rate, miss) == ("bracket", 32.0, 64.0)
    assert capacity_text(kind, rate, miss, 64.0) == "32-64/s"
    # every rate steady but the gap a factor 2 > MAX_INTERPOLATION_RATIO: still a bracket
    assert 1 < MAX_INTERPOLATION_RATIO < 2
    assert slo_capacity(t, "none", 0.9, pd.Series(True, index=t.index))[0] == "bracket"
    # a steady miss close enough above a steady meet: interpolated
    close = t.assign(rate_per_s=[16.0, 32.0, 32.0 * MAX_INTERPOLATION_RATIO])
    assert slo_capacity(close, "none", 0.9, pd.Series(True, index=t.index))[0] == "between"


def test_unknown_capacity_says_how_long_a_run_would_make_it_known():
    # met everywhere, no rate steady (a 30 s run, mean E2E 2.4 s): --duration-s 48 -> 50
    assert duration_to_steady_s([1.1, 2.4]) == 50.0
    text = capacity_text("none", float("nan"), float("nan"), 16.0, 50.0)
    assert text.startswith("unknown: the rates that meet it are not steady states")
    assert "--duration-s 50 would make them steady" in text
    # steady at 2/s, bursts above that meet it: the bound says how long a run would test them
    text = capacity_text("above", 2.0, float("nan"), 8.0, 50.0)
    assert text.startswith(">= 2/s (the highest steady rate that meets it; met at every rate")
    assert text.endswith("; --duration-s 50 would make the rates above steady)")


def test_rate_labels_are_integers_or_three_significant_figures():
    assert [rate_label(r) for r in (4.0, 64.0, 0.5, 3.78848, 12.3456)] == [
        "4", "64", "0.5", "3.79", "12.3"]


def fake_sweep(rates, policies, e2e_mean_s, tpot_ci_high=lambda p, r: 1.1):
    """A serving table, config and prepared sweep for summary_section (the fields it reads)."""
    rows = []
    for p in policies:
        for r in rates:
            rows.append(dict(policy=p, rate_per_s=r, slo_attainment=1.0,
                             e2e_mean_s=e2e_mean_s(r), requests=2 * int(r * 60) + 4,
                             tpot_p50_s=0.01, tpot_p50_speedup=1.0,
                             tpot_p50_speedup_ci_high=tpot_ci_high(p, r),
                             e2e_p50_speedup_ci_high=1.1, goodput_req_s=r * (1.1 if p ==
                             "adaptive" else 1.0), hindsight_best_fixed="fixed:2",
                             gain_over_best_fixed=1.0, ttft_p50_s=0.1, ttft_p99_s=0.2,
                             tpot_p99_s=0.02, e2e_p50_s=1.0, output_throughput_tok_s=100.0,
                             output_throughput_tok_s_ci_low=np.nan,
                             output_throughput_tok_s_ci_high=np.nan, mean_batch=1.0,
                             kv_use=0.1, acceptance_rate=0.7, mean_gamma=2.0))
    t = pd.DataFrame(rows)
    sc = SimpleNamespace(name="s", target_model_id="t", draft="d", gpu_id="g", tp=1,
                         study=SimpleNamespace(temperature=0.0))
    cfg = SimpleNamespace(duration_s=60.0, trace=None, requests_per_replication=None,
                          replications=2, scenario=sc, engine_profile="e", workload="w",
                          workload_source="x.", arrival=SimpleNamespace(label=lambda: "poisson"),
                          alpha_label="m", alpha_mode="m", confidence=0.95,
                          slo_ttft_s=2.0, slo_tpot_s=0.05, slo_attainment_target=0.9,
                          limits=SimpleNamespace(max_num_seqs=8, max_num_batched_tokens=64),
                          schedule_json=None, max_gamma=8)
    kv = SimpleNamespace(kv_capacity_blocks=10)
    prep = SimpleNamespace(hazard_profile=None, default_gamma=2, deployments=[kv, kv],
                           schedule=SimpleNamespace(ranges=((1, 8, 2),), vllm_json=lambda: "{}"),
                           mean_context_tokens=300.0)
    return t, cfg, prep


def test_every_section_marks_a_non_steady_cell_and_says_the_realised_rate():
    rates, policies = [2.0, 32.0], ["none", "fixed:2", "adaptive"]
    t, cfg, prep = fake_sweep(rates, policies, lambda r: 1.0 if r == 2 else 10.0)
    t.loc[t.policy == "adaptive", "tpot_p50_s"] = 0.005
    text = summary_section({"table": t, "prepared": prep}, cfg)
    sections = {k: text.split(f"{k}.")[1].split("\n\n")[0] for k in ("S3", "S4", "S6")}
    # 32/s: a 60 s window holds 6 mean E2E latencies of 10 s, not 20: marked wherever it shows
    assert "32/s  adaptive (5.0 ms) *" in sections["S3"]
    assert "2/s   adaptive (5.0 ms) " in sections["S3"]
    assert sections["S4"].splitlines()[-1].rstrip().endswith("1.00  1.00 *")
    assert all(line.split()[1:3] == ["32", "*"] for line in sections["S6"].splitlines()
               if " 32 " in line)
    assert "* = arrival window < 20x mean E2E: a burst, not a steady state" in text
    # 2 x (2 x 60) + 4 requests over 2 replications of 60 s: 2.03/s realised, not 2
    assert "Realised arrival rate" in text and "2/s: 2.03/s, 32/s: 32.03/s" in text
    assert "capacity" in text and "> 32/s" not in text
    assert "Schedule optimised for: the steady state at this workload's mean context (300 " in text


def test_a_schedule_at_max_gamma_is_flagged():
    t, cfg, prep = fake_sweep([2.0], ["none", "fixed:2"], lambda r: 1.0)
    text = summary_section({"table": t, "prepared": prep}, cfg)
    assert "may lie above" not in text
    cfg.max_gamma = 2  # the schedule's (1, 8, 2) reaches it
    text = summary_section({"table": t, "prepared": prep}, cfg)
    assert ("the best gamma is --max-gamma 2: the optimum may lie above the grid: try "
            "--max-gamma 4.") in text


def test_s2_names_every_rate_where_speculation_is_slower_not_only_from_one_on():
    """Issue 19: fixed:5 0.78x at 40/s and 0.61x at 48/s, yet S2 said 'never', because the
    overloaded top rate was faster again. Every significantly slower rate is named now."""
    rates = [8.0, 40.0, 48.0, 64.0]
    slow = {("fixed:5", 40.0), ("fixed:5", 48.0)}
    t, cfg, prep = fake_sweep(rates, ["none", "fixed:2", "fixed:5"], lambda r: 1.0,
                              lambda p, r: 0.9 if (p, r) in slow else 1.1)
    text = summary_section({"table": t, "prepared": prep}, cfg)
    s2 = text.split("S2.")[1].split("\n\n")[0]
    row = next(line for line in s2.splitlines() if line.strip().startswith("fixed:5"))
    assert row.split(None, 1)[1].startswith("40/s, 48/s ")
    assert "fixed:2  never in the grid" in s2



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
    assert capacity_text(kind, rate, miss, 8.0) == "2-8/s"  # the bracket, 4/s not steady
    # the rate before the first miss steady, the miss not: a bracket (its attainment depends on
    # how long it was overloaded); both steady: interpolated as without the rule
    steady = pd.Series([True, True, True, False], index=t.index)
    assert slo_capacity(t, "none", 0.9, steady, max_ratio=2.0)[:2] == ("bracket", 4.0)
    all_steady = pd.Series(True, index=t.index)
    assert slo_capacity(t, "none", 0.9, all_steady, max_ratio=2.0)[0] == "between"


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
