"""Small builders and checks shared by the tests."""
import io
import json
import os
import resource
import subprocess
import sys
from typing import NamedTuple

import numpy as np
import pandas as pd

from src.config import FixedLength, PointAlpha, UniformLength
from src.costmodel import FlatCostModel
from src.workload import Requests, make_requests


def point_requests(alpha: float, output_tokens: int, replications: int, per_replication: int,
                   seed: int = 11) -> Requests:
    """Requests with exactly this alpha (no clipping, so 1e-12 and 1 - 1e-12 are possible)."""
    req = make_requests(seed, "p", PointAlpha(0.5), FixedLength(output_tokens),
                        UniformLength(100, 200), 1, 0,
                        replications, per_replication)
    return Requests(np.full(req.shape, alpha), req.output_len_tokens, req.prompt_len_tokens)


def rngs(n: int, seed: int = 5):
    return [np.random.default_rng([seed, i]) for i in range(n)]


FLAT = FlatCostModel(draft_cost_ratio=0.2)


GRID_KEYS = ["quality_mode", "serving_mode", "batch_size", "gamma"]


def assert_rows_match(fresh: pd.DataFrame, table: pd.DataFrame, expected_rows: int) -> None:
    """Every column of `fresh` (a run_grid result), as written to CSV, equals `table`'s (read as
    str)."""
    from src.reporting import csv_bytes
    fresh = pd.read_csv(io.StringIO(csv_bytes(fresh).decode()), dtype=str)
    merged = fresh.merge(table, on=GRID_KEYS, suffixes=("", "_other"))
    assert len(merged) == expected_rows
    for col in fresh.columns:
        if col not in GRID_KEYS:
            assert (merged[col] == merged[col + "_other"]).all(), col


class Done(NamedTuple):
    """What a command ended with, like subprocess.CompletedProcess."""
    returncode: int
    stdout: str
    stderr: str


def run_captured(argv: list[str]) -> Done:
    """`python run.py ARGV` in this process: run.main's exit status (argparse's SystemExit
    included) and what it printed. Cheaper than a subprocess (no interpreter start, imports or
    compiled-loop loading per call); tests/test_failures.py runs the real process where the process
    itself is what is tested (signals, exit status, what gets imported)."""
    import contextlib

    import run
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Done(code, out.getvalue(), err.getvalue())


def run_main(capsys, argv: list[str]) -> Done:
    """run_captured, for tests that hold pytest's capsys (what they printed before is dropped)."""
    capsys.readouterr()
    return run_captured(argv)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# run_captured restated without importing this module: the child then loads only what the commands
# load (bad input is answered before pandas, tests/test_failures.py), about 0.6 s less CPU a child
CHILD = """
import contextlib, io, json, sys
import run
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run.main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    print(json.dumps([argv, code, err.getvalue()]), flush=True)
"""


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def run_cases(cases: list[list[str]], timeout_s: float = 240) -> dict:
    """{tuple(argv): (exit code, stderr)} of `python run.py ARGV` for each case, run_captured in
    one child process with a 4 GiB address-space limit and a timeout: for inputs that once hung a
    run or exhausted memory, so a regression fails the test instead of the machine."""
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cases)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout_s,
                              preexec_fn=limit_memory)
        stdout, stderr = done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        stdout, stderr = [b.decode() if isinstance(b, bytes) else (b or "")
                          for b in (e.stdout, e.stderr)]
    results = {}
    for line in stdout.splitlines():
        argv, code, err = json.loads(line)
        results[tuple(argv)] = (code, err)
    missing = [c for c in cases if tuple(c) not in results]
    assert not missing, f"hung or crashed at {missing[0]} (stderr: {stderr[-800:]!r})"
    return results
