"""src/processes.py: work in child processes returns its result, reports its errors, and ends when
the parent stops waiting."""
from __future__ import annotations

import multiprocessing
import os
import signal
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



SIGINT_BLOCKED_AT_FORK: list[bool] = []  # set in a forked child, at the fork


def _record_sigint_mask() -> None:
    SIGINT_BLOCKED_AT_FORK[:] = [signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])]


def sigint_state():
    blocked_now = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    return SIGINT_BLOCKED_AT_FORK, signal.getsignal(signal.SIGINT), blocked_now


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask")
                    or multiprocessing.get_start_method() != "fork", reason="POSIX fork")
def test_ctrl_c_is_blocked_until_the_child_ignores_it():
    """SIGINT is blocked across the fork (a Ctrl-C to the process group cannot interrupt the child's
    start-up); the child ends up ignoring it, unblocked; the parent's mask is restored."""
    os.register_at_fork(after_in_child=_record_sigint_mask)  # only records, in later children
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert Background(sigint_state).result() == ([True], signal.SIG_IGN, False)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
