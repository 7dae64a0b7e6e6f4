"""`plan` with a [disagg] table: aggregated and disaggregated rows with and without speculation,
a shape that cannot run skipped with its reason, the capacity rule min(prefill, y x decode) in
closed form, the rule against serve's joint simulator at one point, and bad input in one line.

The plans are cheap: Llama-3.1-8B on one L4 per worker with long prompts (cnn-dailymail), so the
prefill pool binds at a few requests/s. The decode pool's probes are the costly part (serve's
disaggregated simulator, windows of 90-150 s for 20 mean E2E latencies of ~5 s), so the plan is
searched once (the module's `planned` fixture) at the tolerance the joint-simulator check needs,
and that check takes the rule's two capacities from its rows instead of searching them again.
"""
import json
import math

import pandas as pd
import pytest

from tests.helpers import run_captured

PLAN = """
[plan]
gpus = ["l4"]
tp = [1]
pairs = ["llama-3.1-8b+llama-3.2-1b"]
policies = ["fixed:3"]
workloads = ["cnn-dailymail"]
slo = "ttft=2s,tpot=100ms"
target_rate = 10
alpha = 0.7
duration_s = 10
tolerance = 0.1
start_rate = 2

[prices]
source = "a test price"
l4 = 0.5

[disagg]
prefill_workers = [1, 2]
prefill = ["tp1"]
decode_workers = [1, 3]
decode = ["tp1", "tp3"]
"""


def refused(tmp_path, text: str) -> str:
    plan, out = tmp_path / "bad.toml", tmp_path / "out"
    plan.write_text(text)
    done = run_captured(["plan", "--plan", str(plan), "--out", str(out), "--quiet"])
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert not out.exists()
    return lines[0]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("disagg-plan")
    (tmp / "p.toml").write_text(PLAN)
    done = run_captured(["plan", "--plan", str(tmp / "p.toml"), "--out", str(tmp / "out"),
                         "--workers", "1", "--no-plots"])
    assert done.returncode == 0, done.stderr
    return done, tmp / "out"


def test_aggregated_and_disaggregated_rows_with_and_without_speculation(planned):
    done, out = planned
    agg = pd.read_csv(out / "results/plan.csv")
    dis = pd.read_csv(out / "results/plan_disagg.csv")
    assert set(agg.policy) == {"none", "fixed:3"}
    assert set(dis.policy) == {"none", "fixed:3"}
    # 2 prefill counts x 2 decode counts x the one shape that runs, each with both policies
    assert sorted(set(dis["shape"])) == ["1P(tp1)+1D(tp1)", "1P(tp1)+3D(tp1)",
                                         "2P(tp1)+1D(tp1)", "2P(tp1)+3D(tp1)"]
    assert len(dis) == 8
    summary = (out / "results/summary.txt").read_text()
    for part in ("P4. Disaggregated (xPyD)", "P5. Cheaper per million output tokens",
                 "without speculation: aggregated", "with speculation: aggregated",
                 "P6. Speculation and the decode pool's size"):
        assert part in summary, part


def test_a_shape_that_cannot_run_is_skipped_with_the_reason(planned):
    done, out = planned
    summary = (out / "results/summary.txt").read_text()
    skipped = [ln for ln in summary.splitlines() if "Skipped:" in ln and "D(tp3)" in ln]
    assert len(skipped) == 4  # each candidate with the tp3 decode shape
    assert all("disagg.decode_tp: 3 does not divide the 32 query heads" in ln for ln in skipped)
    assert "tp3" not in set(pd.read_csv(out / "results/plan_disagg.csv").decode)


def test_the_capacity_rule_in_closed_form(planned):
    """capacity = min(C_prefill(x), y x C_decode); cost = price x GPUs / (3600 x capacity x
    tokens per request) x 1e6; the decode pool for the target = ceil(T / C_decode)."""
    _, out = planned
    dis = pd.read_csv(out / "results/plan_disagg.csv")
    for r in dis.itertuples():
        y = r.decode_workers
        assert r.capacity_per_s == pytest.approx(
            min(r.prefill_capacity_per_s, y * r.decode_capacity_per_worker_per_s), rel=1e-5)
        assert r.bound_by == ("prefill" if r.prefill_capacity_per_s
                              < y * r.decode_capacity_per_worker_per_s else "decode")
        assert r.gpus == r.prefill_workers + y
        assert r.cost_per_mtok == pytest.approx(
            0.5 * r.gpus / (3600 * r.capacity_per_s * r.output_tokens_per_request) * 1e6,
            rel=1e-4)
        assert r.decode_workers_for_target == math.ceil(10 / r.decode_capacity_per_worker_per_s)
    one = dis[(dis["shape"] == "1P(tp1)+1D(tp1)")]
    two = dis[(dis["shape"] == "2P(tp1)+1D(tp1)")]
    # one prefill server at ~1000-token prompts on an L4 binds below a greedy decode worker
    assert (one[one.policy == "none"].bound_by == "prefill").all()
    assert (two.prefill_capacity_per_s.to_numpy() > one.prefill_capacity_per_s.to_numpy()).all()


def test_the_min_rule_against_serves_joint_simulator(planned):
    """At 1P1D (prefill pool binding), serve's joint simulator (prefill queue and decode worker
    together) finds a capacity at most the rule's (TTFT's two waits add there) and within two
    search tolerances below it. The rule's two capacities are the plan's 1P1D greedy row (its
    searches are the tasks below: the same deployment, SLO, window, tolerance and seed)."""
    from src.plan.disagg_config import DisaggCandidate, WorkerShape
    from src.plan.disagg_search import joint_capacity_search, pool_tasks
    from src.plan.search import Deployment, SearchTask

    _, out = planned
    d = Deployment("l4", 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "cnn-dailymail")
    base = SearchTask(d, "none", 2.0, 0.1, 0.9, 0.7, None, 10.0, 2, 0.1, 2.0, 20261129, 8)
    cand = DisaggCandidate(1, WorkerShape(), 1, WorkerShape(), "auto")
    # the plan searched exactly these two pool tasks (its cache holds each under its task)
    cached = [json.loads(f.read_text())["task"] for f in (out / "runs/plan-cache").glob("*.json")]
    for task in pool_tasks(base, cand).values():
        assert json.loads(json.dumps(task.canonical())) in cached, task.pool
    dis = pd.read_csv(out / "results/plan_disagg.csv")
    (row,) = dis[(dis["shape"] == "1P(tp1)+1D(tp1)") & (dis.policy == "none")].itertuples()
    rule = min(row.prefill_capacity_per_s, row.decode_capacity_per_worker_per_s)
    joint = joint_capacity_search(base, cand)
    assert joint["bound"] == "found" and rule > 0
    assert joint["capacity_per_s"] <= rule * 1.1
    assert joint["capacity_per_s"] >= rule / 1.1 ** 2


def test_bad_disagg_tables_are_one_line(tmp_path):
    head = '[plan]\ngpus = ["l4"]\npairs = ["llama-3.1-8b+llama-3.2-1b"]\n[disagg]\n'
    assert refused(tmp_path, head + 'prefill = ["tp1"]\ndecode = ["tp1"]\nshapes = 1\n') == (
        "error: disagg.shapes: unknown key; allowed: prefill_workers, prefill, decode_workers, "
        "decode, kv_link")
    line = refused(tmp_path, head + 'prefill = ["tp1 xp4"]\ndecode = ["tp1"]\n')
    assert line.startswith("error: disagg.prefill: 'tp1 xp4': bad word 'xp4'")
    assert "disagg.decode: required" in refused(tmp_path, head + 'prefill = ["tp1"]\n')
    line = refused(tmp_path, head + 'prefill = ["tp1"]\ndecode = ["tp1"]\n'
                                    'decode_workers = [0]\n')
    assert line == ("error: disagg.decode_workers: 0 is not a worker count; allowed: integers "
                    "1..64")
    line = refused(tmp_path, head + 'prefill = ["tp1"]\ndecode = "tp1"\n')
    assert line == "error: disagg.decode: expected a non-empty TOML list, got 'tp1'"
    line = refused(tmp_path, head + 'prefill = ["tp1"]\ndecode = ["tp1"]\nkv_link = "ib"\n')
    assert line.startswith("error: disagg.kv_link: unknown 'ib'; allowed: auto, nvlink")


def test_a_decode_shape_that_does_not_fit_names_the_smallest_that_does():
    """DeepSeek-V3 on H200: a decode worker of TP 4 holds 168 GB of weights per GPU; the reason
    names decode_tp 1, decode_dp 8, decode_ep 8; a DP worker over 8 GPUs spans nodes."""
    from src.plan.disagg_config import DisaggCandidate, WorkerShape
    from src.plan.disagg_search import candidate_check
    from src.plan.search import Deployment, SearchTask

    d = Deployment("h200", 1, "deepseek-v3", "mtp", "sglang", "alpaca")
    base = SearchTask(d, "none", 2.0, 0.05, 0.9, 0.8, None, 10.0, 2, 0.1, 2.0, 1, 8)
    prefill = WorkerShape(8, 1, 8)
    why = candidate_check(base, DisaggCandidate(1, prefill, 1, WorkerShape(4, 1, 4), "auto"))
    assert why.startswith("disagg.decode_tp: deepseek-v3 at decode_tp 4, decode_dp 1 holds")
    assert why.endswith("allowed: decode_tp 1, decode_dp 8, decode_ep 8 (the smallest shape "
                        "that fits, 97.4 GB per GPU)")
    assert candidate_check(base, DisaggCandidate(1, prefill, 1, WorkerShape(1, 8, 8),
                                                 "auto")) is None
    why = candidate_check(base, DisaggCandidate(1, prefill, 1, WorkerShape(2, 8, 16), "auto"))
    assert why == ("disagg.decode: a worker of 16 GPUs spans nodes (its all-to-all over the "
                   "network is not modelled); allowed: tp x dp <= 8")


def test_an_oversized_disagg_table_is_counted_and_refused(tmp_path):
    """The pool searches count towards plan's limit: 10 prefill x 40 decode shapes x (2 policies
    + 64 prefill counts) = 26,400 on top of the 2 aggregated searches."""
    from src.plan.cli import MAX_SEARCHES

    prefill = ", ".join(f'"tp1 dp{k}"' for k in range(1, 11))
    decode = ", ".join(f'"tp1 dp{k}"' for k in range(1, 41))
    line = refused(tmp_path, '[plan]\ngpus = ["l4"]\npairs = ["llama-3.1-8b+llama-3.2-1b"]\n'
                             'policies = ["fixed:3"]\n[disagg]\n'
                             f'prefill_workers = {list(range(1, 65))}\nprefill = [{prefill}]\n'
                             f'decode = [{decode}]\n')
    assert line == ("error: --plan: 1 deployments (1 GPUs x 1 tp sizes x 1 pairs x 1 engines x "
                    "1 workloads) x 2 policies + the [disagg] table's pool searches = 26,402 "
                    f"searches; allowed: at most {MAX_SEARCHES:,} searches a plan (list fewer, "
                    "or split it into several plans)")
