"""A reader that stops early (`python run.py step-time ... | head`): run.py ends quietly, exit 0,
whatever the command (run.py main: _silence_closed_streams). The real process on a real pipe whose
reading end is closed before the command writes, so every write it makes fails (EPIPE)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import run

ROOT = Path(__file__).resolve().parents[1]
STEP_TIME = ["step-time", "--gpu", "h200", "--model", "llama-3.1-8b", "--batch", "1,2",
             "--positions", "1,2"]


def _run_into_closed_pipe(argv: list[str], stderr_too: bool = False):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before the first write
    try:
        return subprocess.run([sys.executable, "run.py", *argv], cwd=ROOT, stdout=write_end,
                              stderr=write_end if stderr_too else subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [
    STEP_TIME + ["--engine", "vllm-v1"],  # the table, then the measured-kernel footer
    STEP_TIME + ["--csv"],
    ["step-time", "--list"],
    ["step-time", "--help"],  # argparse's exit
])
def test_a_closed_stdout_ends_quietly_with_exit_0(argv):
    done = _run_into_closed_pipe(argv)
    assert (done.returncode, done.stderr.decode()) == (0, "")


def test_stdout_and_stderr_on_one_closed_pipe():  # `... 2>&1 | head`
    assert _run_into_closed_pipe(STEP_TIME + ["--engine", "vllm-v1"], True).returncode == 0


def test_a_broken_pipe_that_is_not_stdout_is_not_swallowed(monkeypatch):
    def broken(argv):
        raise BrokenPipeError(32, "a worker's pipe")
    monkeypatch.setattr(run, "_main", broken)
    with pytest.raises(BrokenPipeError):
        run.main(["step-time"])
