"""`python run.py plan`: bad input (one line, exit 2, nothing written), the outputs, the cache, and
the same bytes on a Dask cluster (tests/test_executor.py has the worker-killing check).

The end-to-end plan is the cheapest there is: an 8B model on an L4 and an A40 with a 15 ms TPOT
SLO, which no rate meets (their batch-1 step is longer), so every search halves down over short
windows; the search itself is checked in tests/test_plan_search.py.
"""
import os
import time

import numpy as np
import pandas as pd
import pytest

from src.plan.report import pareto_front
from tests.helpers import run_captured

CHEAP = ["plan", "--gpus", "l4,a40", "--pairs", "llama-3.1-8b+llama-3.2-1b", "--policies",
         "fixed:3", "--workloads", "alpaca", "--slo", "ttft=2s,tpot=15ms", "--duration-s", "10",
         "--start-rate", "1", "--target-rate", "5", "--quiet"]


def refused(tmp_path, *args):
    out = tmp_path / "out"
    done = run_captured(["plan", *args, "--out", str(out)])
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert not out.exists()
    return lines[0]


def test_unknown_gpu_and_model_are_refused(tmp_path):
    base = ["--pairs", "llama-3.1-8b+llama-3.2-1b"]
    line = refused(tmp_path, "--gpus", "h100-sxm,h900", *base)
    assert "--gpus: unknown GPU 'h900'; allowed:" in line and "h100-sxm" in line
    line = refused(tmp_path, "--gpus", "h100-sxm", "--pairs", "llama-9b+llama-3.2-1b")
    assert "--pairs: unknown target model 'llama-9b'" in line
    line = refused(tmp_path, "--gpus", "h100-sxm", "--pairs", "llama-3.1-8b+tiny")
    assert "--pairs: unknown draft 'tiny'; allowed: eagle, ngram" in line
    line = refused(tmp_path, "--gpus", "h100-sxm", *base, "--engines", "vllm-9")
    assert "--engines: unknown engine profile 'vllm-9'" in line
    line = refused(tmp_path, "--gpus", "h100-sxm", *base, "--policies", "fixed:99")
    assert line.startswith("error: --policies")


def test_prices_must_be_positive_and_cover_the_gpus(tmp_path):
    base = ["--gpus", "l4,a40", "--pairs", "llama-3.1-8b+llama-3.2-1b"]
    assert "--prices a40: '0' is not a price > 0" in refused(tmp_path, *base, "--prices",
                                                              "l4=0.5,a40=0")
    assert "is not a price > 0" in refused(tmp_path, *base, "--prices", "l4=-1,a40=1")
    assert "no price for a40" in refused(tmp_path, *base, "--prices", "l4=0.5")
    assert "the plan does not list" in refused(tmp_path, *base, "--prices",
                                                "l4=0.5,a40=1,h100-sxm=3")
    plan = tmp_path / "p.toml"
    plan.write_text('[plan]\ngpus = ["l4"]\npairs = ["llama-3.1-8b+llama-3.2-1b"]\n'
                    '[prices]\nsource = "test"\nl4 = -0.5\n')
    assert "prices.l4: -0.5 is not a price > 0" in refused(tmp_path, "--plan", str(plan))
    plan.write_text('[plan]\ngpus = ["l4"]\npairs = ["llama-3.1-8b+llama-3.2-1b"]\n'
                    '[prices]\nl4 = 0.5\n')
    assert "prices.source: say where the prices come from" in refused(tmp_path, "--plan",
                                                                       str(plan))


def test_plan_file_errors(tmp_path):
    assert "--plan: file not found" in refused(tmp_path, "--plan", str(tmp_path / "nope.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[plan\n")
    assert "is not valid TOML" in refused(tmp_path, "--plan", str(bad))
    bad.write_text('[plan]\ngpu = ["l4"]\n')
    assert "plan.gpu: unknown key; allowed: gpus" in refused(tmp_path, "--plan", str(bad))
    assert "--gpus: required" in refused(tmp_path)


def test_nothing_fits_says_what_would(tmp_path):
    line = refused(tmp_path, "--gpus", "l4,a40", "--pairs", "llama-3.1-70b+llama-3.2-1b")
    assert "no deployment of the plan fits in GPU memory" in line
    assert "would fit: llama-3.1-70b+llama-3.2-1b at tp 4 on a40" in line
    assert "the largest target that fits these GPUs and tp sizes is" in line


def test_a_dask_address_that_does_not_answer(tmp_path):
    start = time.perf_counter()
    line = refused(tmp_path, "--gpus", "l4", "--pairs", "llama-3.1-8b+llama-3.2-1b",
                   "--dask", "tcp://127.0.0.1:9")
    assert time.perf_counter() - start < 10
    assert "--dask: no Dask scheduler answered at tcp://127.0.0.1:9" in line
    assert "--dask: 'local:x' is neither" in refused(tmp_path, "--gpus", "l4", "--pairs",
                                                     "llama-3.1-8b+llama-3.2-1b", "--dask",
                                                     "local:x")


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "out"
    done = run_captured([*CHEAP, "--workers", "1", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    return out


def files(out):
    return {p: (out / p).read_bytes() for p in ("results/plan.csv", "results/summary.txt",
                                                "plots/plan_capacity.png")}


def test_outputs(local_run):
    t = pd.read_csv(local_run / "results" / "plan.csv")
    assert len(t) == 4  # 2 deployments x (none, fixed:3)
    assert list(t.policy) == ["none", "fixed:3"] * 2
    assert (t.capacity_bound == "below").all() and (t.capacity_per_s == 0).all()
    summary = (local_run / "results" / "summary.txt").read_text()
    assert "=== CAPACITY PLAN (python run.py plan) ===" in summary
    assert "P1. Cheapest deployment meeting the SLO at 5 requests/s" in summary
    assert "none: no deployment meets the SLO at any rate searched" in summary
    assert (local_run / "plots" / "plan_capacity.png").read_bytes()[:4] == b"\x89PNG"


def test_a_rerun_reuses_every_search_and_writes_the_same_bytes(local_run):
    before = files(local_run)
    cache = local_run / "runs" / "plan-cache"
    assert len(os.listdir(cache)) == 4
    done = run_captured([a for a in CHEAP if a != "--quiet"] + ["--out", str(local_run)])
    assert done.returncode == 0
    assert "4 reused from" in done.stderr and "0 to run" in done.stderr
    assert files(local_run) == before


def test_dask_gives_the_same_bytes(local_run, tmp_path):
    out = tmp_path / "dask"
    done = run_captured([*CHEAP, "--dask", "local:2", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    assert files(out) == files(local_run)


def test_pareto_front():
    cost = np.array([1.0, 2.0, 3.0, 1.5, 4.0])
    cap = np.array([10.0, 30.0, 20.0, 5.0, 40.0])
    assert list(pareto_front(cost, cap)) == [0, 1, 4]


def test_the_study_keeps_the_plan_outputs(local_run, tmp_path):
    """A study run into the same folder rewrites summary.txt: the plan section stays, as do
    plan.csv and the plot (not the study's files)."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(local_run, out)
    before = files(out)
    fast = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_study.toml")
    done = run_captured(["--config", fast, "--scenario", "reference", "--batch-sizes", "1,2",
                         "--gammas", "2", "--no-plots", "--quiet", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    after = files(out)
    assert after["results/plan.csv"] == before["results/plan.csv"]
    assert after["plots/plan_capacity.png"] == before["plots/plan_capacity.png"]
    summary = after["results/summary.txt"].decode()
    section = before["results/summary.txt"].decode()
    section = section[section.index("=== CAPACITY PLAN"):]
    assert summary.startswith("Batched speculative decoding") and summary.endswith(section)


def test_a_full_disk_is_one_line_and_leaves_no_debris(tmp_path, monkeypatch):
    """ENOSPC while a finished search is kept: one error line, exit 2, no *.tmp left in
    runs/plan-cache and no outputs written."""
    import errno

    import src.plan.cache

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(src.plan.cache, "_write", full, raising=False)
    monkeypatch.setattr(src.plan.cache.json, "dump", full)  # where a cache writes with it
    out = tmp_path / "out"
    done = run_captured([*CHEAP, "--workers", "1", "--out", str(out)])
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: --out: could not keep a finished search in {out}/runs/plan-cache "
                     "(No space left on device); previous outputs left as they were, finished "
                     "searches kept"]
    assert os.listdir(out / "runs" / "plan-cache") == []
    assert not (out / "results" / "plan.csv").exists()


def test_a_string_for_a_list_a_price_twice_and_a_huge_plan_file_are_refused(tmp_path):
    """As README says of every TOML input and option: a TOML string where a list is meant, a
    value given twice, and a file over the 4 MiB TOML cap."""
    plan = tmp_path / "p.toml"
    plan.write_text('[plan]\ngpus = "h100-sxm"\npairs = ["llama-3.1-8b+llama-3.2-1b"]\n')
    assert refused(tmp_path, "--plan", str(plan)) == (
        "error: plan.gpus: expected a TOML list, e.g. gpus = [\"l40s\", \"h100-sxm\"], got "
        "'h100-sxm'")
    plan.write_text('[plan]\ngpus = ["h100-sxm"]\npairs = "llama-3.1-8b+llama-3.2-1b"\n')
    assert "plan.pairs: expected a TOML list" in refused(tmp_path, "--plan", str(plan))
    line = refused(tmp_path, "--gpus", "h100-sxm", "--pairs", "llama-3.1-8b+llama-3.2-1b",
                   "--prices", "h100-sxm=3,h100-sxm=4")
    assert line == ("error: --prices: h100-sxm given twice in 'h100-sxm=3,h100-sxm=4'; give "
                    "each GPU's price once")
    plan.write_text('[plan]\ngpus = ["h100-sxm"]\npairs = ["llama-3.1-8b+llama-3.2-1b"]\n'
                    + "# padding\n" * 1_000_000)  # 10 MB
    assert "is larger than 4 MiB, the most this option reads" in refused(tmp_path, "--plan",
                                                                        str(plan))
