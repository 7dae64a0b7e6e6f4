"""src/processes.py: work in child processes returns its result, reports its errors, and ends when
the parent stops waiting."""
from __future__ import annotations

import os
import time

import pytest

from src.processes import Background, WorkerError, map_in_processes


def square(x):
    return x * x


def fail(message):
    raise ValueError(message)


def sleep_then_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def test_results_come_back_in_order_from_other_processes():
    assert map_in_processes(square, [(i,) for i in range(5)], workers=2) == [0, 1, 4, 9, 16]
    assert Background(sleep_then_pid, 0).result() != os.getpid()


def test_an_error_in_the_child_is_raised_in_the_parent_with_its_traceback():
    with pytest.raises(WorkerError) as info:
        Background(fail, "bad scenario").result()
    assert "ValueError: bad scenario" in str(info.value) and "Traceback" in str(info.value)


def test_kill_ends_a_running_child():
    job = Background(sleep_then_pid, 60)
    job.kill()
    assert not job._process.is_alive() and job._process.exitcode is not None
