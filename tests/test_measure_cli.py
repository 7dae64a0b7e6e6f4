"""Tests of `python run.py measure` (src/measure/cli.py): bad input, missing torch or GPU, the
dry-run plan, and a tiny CPU smoke run where torch is installed."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import run
from src.measure import cli
from src.measure.plan import COLUMNS

ROOT = Path(__file__).resolve().parent.parent
# Runs src.measure with the named top-level modules made unimportable.
BLOCKING_RUNNER = """
import runpy, sys
blocked = set(sys.argv[1].split(","))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Block())
sys.argv = ["src.measure"] + sys.argv[2:]
runpy.run_module("src.measure", run_name="__main__", alter_sys=True)
"""
SMALL = ["--model", "llama-3.1-8b", "--batch", "1,2", "--positions", "1,3", "--context", "16"]


def exit_status(argv: list[str]) -> int:
    """cli.main's return value, or the status argparse exits with."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def run_blocked(blocked: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKING_RUNNER, blocked, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, flag", [
    (["--batch", "0"], "--batch"),
    (["--batch", "1,x"], "--batch"),
    (["--context", "-1"], "--context"),
    (["--model", "llama-9b"], "--model"),
    (["--draft", "nope"], "--draft"),
    (["--mode", "fast"], "--mode"),
    (["--attention", "flash,xformers"], "--attention"),
    (["--device", "tpu"], "--device"),
    (["--device", "cpu", "--mode", "graph"], "--mode"),
    (["--what", "prefill"], "--prefill"),
    (["--prefill", "128", "--what", "forward"], "--what"),
    (["--min-reps", "10", "--max-reps", "5"], "--max-reps"),
    (["--target-ms", "0"], "--target-ms"),
    (["--warmup", "0"], "--warmup"),
    (["--time-budget-s", "nan"], "--time-budget-s"),
    (["--estimate-gpu", "h900"], "--estimate-gpu"),
    (["--draft", "llama-3.1-8b"], "--draft"),
    (["--batch", "1", "--batch", "2"], "--batch"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, args, flag):
    out = tmp_path / "steps.csv"
    out.write_text("previous\n")
    model = [] if "--model" in args else ["--model", "llama-3.1-8b"]
    assert exit_status(model + ["--out", str(out)] + args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {flag}")
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steps.csv"]


@pytest.mark.parametrize("out, message", [
    ("missing-folder/x.csv", "does not exist"), (".", "is a folder"), (None, "required")])
def test_bad_out_paths(tmp_path, capsys, monkeypatch, out, message):
    monkeypatch.chdir(tmp_path)
    argv = SMALL + (["--out", out] if out else [])
    assert exit_status(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and message in err and err.count("\n") == 1


def test_run_py_dispatches_measure(capsys):
    assert run.main(["measure", "--model", "llama-3.1-8b", "--batch", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --batch")


def test_dry_run_needs_neither_torch_nor_the_plotting_stack(tmp_path):
    done = run_blocked("torch,matplotlib,scipy,pandas",
                       ["--model", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--batch", "1,128",
                        "--positions", "1,5", "--context", "8192", "--dry-run"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    # 8B at batch 128 x 8192 tokens needs 128 GiB of KV cache: skipped on an H200, both positions
    # and both kernels; the 1B draft (positions 1 only) fits
    assert sum(line.startswith("skip (memory): llama-3.1-8b") for line in lines) == 4
    assert lines[-1].startswith("plan: 8 configurations to measure (llama-3.1-8b 4, "
                                "llama-3.2-1b 4), 4 skipped for memory on h200")


def test_without_torch_one_line_and_exit_2(tmp_path):
    out = tmp_path / "x.csv"
    done = run_blocked("torch", SMALL + ["--out", str(out)])
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "needs PyTorch" in done.stderr
    assert "requirements-gpu.txt" in done.stderr
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# With torch (CPU): skipped where torch is not installed
# ------------------------------------------------------------------------------------------------
def test_without_a_gpu_one_line_and_exit_2(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = tmp_path / "x.csv"
    assert cli.main(SMALL + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --device: no CUDA GPU")
    assert not out.exists() and not cli.env_path(out).exists()


def read_rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames), list(reader)


def test_cpu_smoke_run_writes_the_calibration_format(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "steps.csv"
    argv = ["--model", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--device", "cpu",
            "--batch", "1,2", "--positions", "1,3", "--context", "8",
            "--what", "forward,attention_only,prefill", "--prefill", "4,16", "--prefill-batch", "2",
            "--attention", "flash,cudnn,math", "--target-ms", "0.5", "--min-reps", "2",
            "--max-reps", "3", "--warmup", "1", "--out", str(out)]
    assert cli.main(argv) == 0
    header, rows = read_rows(out)
    assert header == list(COLUMNS)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600
    # target: 2 attention backends that run on the CPU x (forward 2x2 + attention_only 2x2 +
    # prefill 2); draft (positions 1 only): 2 x (2 + 2 + 2)
    assert len(rows) == 2 * (4 + 4 + 2) + 2 * (2 + 2 + 2)
    assert {r["model"] for r in rows} == {"tiny-llama-3.1-8b", "tiny-llama-3.2-1b"}
    assert {r["attention_backend"] for r in rows} == {"flash", "math"}
    assert {r["mode"] for r in rows} == {"eager"}
    for r in rows:
        assert int(r["tokens"]) == int(r["batch"]) * int(r["positions"])
        assert 2 <= int(r["reps"]) <= 3
        t = {k: float(r[k]) for k in ("min_ms", "p10_ms", "median_ms", "p90_ms")}
        assert 0 < t["min_ms"] <= t["p10_ms"] <= t["median_ms"] <= t["p90_ms"]
        if r["what"] == "prefill":
            assert r["context"] == "0" and r["batch"] == "2"
    draft = [r for r in rows if r["model"] == "tiny-llama-3.2-1b" and r["what"] != "prefill"]
    assert {r["positions"] for r in draft} == {"1"}
    env = json.loads(cli.env_path(out).read_text())
    assert env["complete"] is True and env["rows"] == len(rows) and env["device"] == "cpu"
    assert env["torch"] and env["rep_policy"]["min_reps"] == 2
    assert env["kernels"]["forward"]["per_layer"] == env["kernels"]["prefill"]["per_layer"] > 20
    assert env["kernels"]["attention_only"] == {"per_layer": 3, "fixed": 11}
    assert len(env["skipped"]) == len(rows) // 2  # every cudnn configuration, with its reason
    assert all(s["attention"] == "cudnn" and "could not run" in s["reason"]
               for s in env["skipped"])
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"measure: {len(rows)} rows")


def test_time_budget_skips_configurations_and_says_so(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "steps.csv"
    rc = cli.main(SMALL + ["--draft", "llama-3.2-1b", "--device", "cpu", "--time-budget-s",
                           "0.001", "--quiet", "--out", str(out)])
    env = json.loads(cli.env_path(out).read_text())
    _, rows = read_rows(out)
    # each model measures its first configuration, then the spent budget skips the rest
    assert rc == 0 and [(r["model"], r["batch"], r["positions"]) for r in rows] == [
        ("tiny-llama-3.1-8b", "1", "1"), ("tiny-llama-3.2-1b", "1", "1")]
    assert len(env["skipped"]) == 3 + 1 and all("time budget" in s["reason"]
                                                 for s in env["skipped"])


def test_a_terminated_run_keeps_the_rows_it_measured(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "steps.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "src.measure", "--model", "llama-3.1-8b", "--device", "cpu",
         "--batch", ",".join(map(str, range(1, 200))), "--context", "64", "--min-reps", "3",
         "--max-reps", "3", "--warmup", "1",
         "--out", str(out)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("[2/"):  # two rows measured
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err
    header, rows = read_rows(out)
    assert header == list(COLUMNS) and 2 <= len(rows) < 199
    env = json.loads(cli.env_path(out).read_text())
    assert env["complete"] is False and env["rows"] == len(rows)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
