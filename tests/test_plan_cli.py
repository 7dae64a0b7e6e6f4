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
    assert "--pairs: unknown draft 'tiny'; allowed: eagle, mtp, ngram" in line
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


def test_a_name_listed_twice_is_named_in_good_english(tmp_path):
    """'an engine profile' was printed as 'a engine profile is listed twice': the message names the
    repeated item instead, as the study's lists do."""
    msg = refused(tmp_path, "--gpus", "l4", "--pairs", "llama-3.1-8b+llama-3.2-1b", "--engines",
                  "vllm-v1,vllm-v1")
    assert "engine profile 'vllm-v1' is listed twice" in msg and "a engine" not in msg


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


def test_dask_gives_the_same_bytes(local_run, dask_cluster, tmp_path):
    """On the shared two-worker LocalCluster (tests/conftest.py), through its address."""
    out = tmp_path / "dask"
    done = run_captured([*CHEAP, "--dask", dask_cluster.client.scheduler.address, "--out",
                         str(out)])
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
    # the run's notes (GPUs priced from the roofline) come first; then one line
    lines = [ln for ln in done.stderr.strip().splitlines()
             if not ln.startswith("note: --kernels: ")]
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


def test_an_oversized_plan_is_refused_before_any_work(tmp_path):
    """8 GPUs x 64 tp sizes x 5 pairs x 8 engines x 5 workloads x 2 policies: counted and refused
    in one line naming the size that fits, before a deployment is built."""
    from src.plan.cli import MAX_SEARCHES

    start = time.perf_counter()
    line = refused(tmp_path, "--gpus", "l4,a40,l40s,a100-80gb-sxm,h100-sxm,mi300x,h200,b200",
                   "--tp", ",".join(map(str, range(1, 65))),
                   "--pairs", "llama-3.1-8b+llama-3.2-1b,llama-3.1-8b+ngram,llama-3.1-70b+ngram,"
                   "llama-3.1-70b+llama-3.2-1b,llama-3.1-8b+eagle",
                   "--engines", ",".join(sorted(__import__("src.costmodel", fromlist=["x"])
                                                .load_engine_profiles())),
                   "--workloads", ",".join(sorted(__import__("src.online.workloads",
                                                             fromlist=["x"]).load_workloads())),
                   "--policies", "fixed:3")
    assert time.perf_counter() - start < 5
    assert line.startswith("error: plan: 102,400 deployments (8 GPUs x 64 tp sizes x 5 pairs x "
                           "8 engines x 5 workloads) x 2 policies = 204,800 searches; allowed: "
                           f"at most {MAX_SEARCHES:,} searches a plan"), line


def test_memory_checks_run_on_the_executor_with_progress(tmp_path, monkeypatch):
    """The fit checks go to the executor in chunks (search.fit_checks), with progress on stderr;
    here one deployment a chunk, in this process (--workers 1)."""
    import src.plan.cli

    monkeypatch.setattr(src.plan.cli, "FIT_CHUNK", 1, raising=False)
    calls = []
    import src.executor
    real = src.executor.LocalExecutor.map

    def counting(self, fn, arg_tuples, on_done=None):
        calls.append((fn.__name__, len(arg_tuples)))
        return real(self, fn, arg_tuples, on_done)
    monkeypatch.setattr(src.executor.LocalExecutor, "map", counting)
    done = run_captured([a for a in CHEAP if a != "--quiet"]
                        + ["--workers", "1", "--no-plots", "--out", str(tmp_path / "o")])
    assert done.returncode == 0, done.stderr
    assert calls[0] == ("fit_checks", 2)  # 2 deployments, one a chunk
    assert "plan: checking 2 deployments fit in memory on in this process" in done.stderr
    assert "  plan: memory checks 2/2 deployments" in done.stderr


LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 14336, "vocab_size": 128256,
            "tie_word_embeddings": False, "attention_bias": False}
LLAMA_1B = {**LLAMA_8B, "hidden_size": 2048, "num_hidden_layers": 16, "head_dim": 64,
            "intermediate_size": 8192, "tie_word_embeddings": True}


def test_pairs_take_config_json_paths(tmp_path):
    """--pairs PATH.json+PATH.json (and a plan file's relative paths) run as the presets they
    describe: the same capacities as llama-3.1-8b+llama-3.2-1b; plan --help says so."""
    import json

    folder = tmp_path / "my+models"  # a '+' in the path too
    folder.mkdir()
    (folder / "8b.json").write_text(json.dumps(LLAMA_8B))
    (folder / "1b.json").write_text(json.dumps(LLAMA_1B))
    args = ["plan", "--gpus", "l4", "--policies", "fixed:3", "--workloads", "alpaca", "--slo",
            "ttft=2s,tpot=15ms", "--duration-s", "10", "--start-rate", "1", "--quiet",
            "--no-plots", "--workers", "1"]
    by_path = run_captured([*args, "--pairs", f"{folder}/8b.json+{folder}/1b.json",
                            "--out", str(tmp_path / "a")])
    assert by_path.returncode == 0, by_path.stderr
    plan = tmp_path / "my+models" / "p.toml"
    plan.write_text('[plan]\npairs = ["8b.json+1b.json"]\n')
    in_file = run_captured([*args, "--plan", str(plan), "--out", str(tmp_path / "b")])
    assert in_file.returncode == 0, in_file.stderr
    preset = run_captured([*args, "--pairs", "llama-3.1-8b+llama-3.2-1b",
                           "--out", str(tmp_path / "c")])
    assert preset.returncode == 0, preset.stderr
    cols = ["policy", "capacity_per_s", "first_miss_per_s", "capacity_bound"]
    a, b, c = (pd.read_csv(tmp_path / x / "results" / "plan.csv") for x in "abc")
    assert a.target.iloc[0] == str(folder / "8b.json") and b.target.iloc[0] == a.target.iloc[0]
    assert a[cols].equals(c[cols]) and b[cols].equals(c[cols])
    assert "config.json" in run_captured(["plan", "--help"]).stdout


def test_the_real_cause_is_named_not_memory(tmp_path):
    """A tp that does not divide the heads, a vocabulary mismatch, a bad config.json: each named,
    none called "does not fit in GPU memory"."""
    import json

    line = refused(tmp_path, "--gpus", "l4", "--tp", "3", "--pairs", "llama-3.1-8b+llama-3.2-1b")
    assert line == ("error: --pairs: no deployment of the plan can run (llama-3.1-8b+llama-3.2-1b"
                    " tp3 l4 vllm-v1 sharegpt: cannot run at tp 3: 3 does not divide n_heads=32 "
                    "and n_kv_heads=8 of llama-3.1-8b; allowed: 1, 2, 4, 8, 16, 32)")
    line = refused(tmp_path, "--gpus", "l4", "--pairs", "llama-3.1-8b+qwen2.5-0.5b")
    assert line.startswith("error: --pairs: qwen2.5-0.5b has a 151936-token vocabulary, "
                           "llama-3.1-8b 128256: the draft must share the target's vocabulary")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({k: v for k, v in LLAMA_8B.items() if k != "hidden_size"}))
    line = refused(tmp_path, "--gpus", "l4", "--pairs", f"{bad}+ngram")
    assert line == f"error: --pairs: {bad}: hidden_size is missing (llama)"
    line = refused(tmp_path, "--gpus", "l4", "--pairs", "llama-3.1-70b+llama-3.2-1b")
    assert "no deployment of the plan fits in GPU memory (llama-3.1-70b+llama-3.2-1b tp1 l4 " \
           "vllm-v1 sharegpt: llama-3.1-70b at tp=1" in line


def test_the_example_plan_file_types_in_no_timing():
    """configs/plan-example.toml said "a few minutes" and ran in seconds: its comment points to
    README's measured timing table instead of typing a time in, and it parses as a plan."""
    import re

    from src.plan.config import build_plan

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs",
                        "plan-example.toml")
    with open(path, encoding="utf-8") as f:
        comments = " ".join(line for line in f.read().splitlines() if line.startswith("#"))
    assert not re.search(r"\b(few|\d+)\s*(minutes?|min|seconds?|s)\b", comments), comments
    assert "README's timing table" in comments
    assert build_plan({}, path).gpus == ("l40s", "a100-80gb-sxm", "h100-sxm")
