"""How the test files are shared between pytest-xdist's worker processes (pytest.ini: -n 2).

Each file is one xdist group, so one worker runs all of a file's tests and a module-scoped fixture
(a study run several tests assert on) runs once; the files that import torch share one group, so
one worker pays its import (~2 s of CPU) and the other never does. The groups that take longest
(several seconds of CPU each: end-to-end runs, subprocesses, torch) go out first and the many small
files fill in behind them, so both workers finish at about the same time; the order changes nothing
else (no test depends on another).
"""
import gc
import os
import sys

import pytest

from tests import signal_state

# PYTHONDONTWRITEBYTECODE (set in some sandboxes and CI images) makes every test process compile
# the project's modules again and pytest rewrite every test file again: collecting the suite took
# 9.2 s of CPU per process with it, 3.7 s with the bytecode kept (2026-12-03, this 2-core
# machine), and each xdist worker and each process a test starts pays it. The tests keep their
# bytecode in __pycache__ (git-ignored), and so do the processes they start.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

TORCH_FILES = {"test_measure_cli.py", "test_measure_model.py", "test_measure_timing.py"}
# the files whose tests use a Dask LocalCluster: one group, so one worker starts the cluster
# (`dask_cluster`, about 5 s of CPU: a scheduler and two worker processes importing the project)
DASK_FILES = {"test_executor.py", "test_plan_cli.py", "test_dask_sweeps.py"}
# seconds each took, one process, -n 0, 2026-12-04 on this 2-core machine under load (the dask
# group alone: 27.5; torch alone: 5.9): test_failures 28.4, dask 27.5, test_online_engine 13.9,
# test_end_to_end 13.0, test_calibration 10.8, test_online_engine_trees 10.1, test_online_cli 9.9,
# test_acceptance_cli 9.1, test_hardware_study 8.4, test_trees_study 7.7, test_validation 6.9,
# torch 5.9, test_docs 5.3, test_concurrent_out 4.3 (test_online_checks 2.1; the files not named
# were not timed then: none held one of the slowest tests)
LONGEST_FIRST = ["test_failures.py", "dask", "test_online_engine.py", "test_end_to_end.py",
                 "test_calibration.py", "test_online_engine_trees.py", "test_online_cli.py",
                 "test_acceptance_cli.py", "test_hardware_study.py", "test_trees_study.py",
                 "test_validation.py", "torch", "test_docs.py", "test_concurrent_out.py"]


def group_of(item) -> str:
    name = item.path.name
    return "torch" if name in TORCH_FILES else "dask" if name in DASK_FILES else name


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group_of(item), len(rank)))  # stable: file order kept
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))


def pytest_collection_finish(session):
    """The modules the test files imported stay for the whole session: the garbage collector need
    not scan them again (gc.freeze), and it runs less often (first-generation threshold 20000
    instead of 700): about 1.5 s less CPU per worker, the tests unchanged."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


@pytest.fixture(scope="session", autouse=True)
def compiled_once():
    """On a fresh clone numba's cache is empty: the serving engine and the study's step loop are
    compiled here, once, before the first test (src/compiled_cache.py `compile_once`: of
    the two xdist workers one compiles, the other waits on the lock and loads), not again by every
    process a test starts while the cache is still empty. Warm: a check of two index files."""
    from src.online.cli import config_from_args, make_parser
    from src.online.study import compile_engine_once, prepare
    from src.serving import compile_step_loop_once

    cfg = config_from_args(make_parser().parse_args([]))
    compile_engine_once(cfg, prepare(cfg))
    compile_step_loop_once()


# the blocked signals and SIGINT/SIGTERM handlers this process began with (an ignored SIGINT, where
# the suite was started as a background job, included): every test must find and leave them so
SIGNALS_AT_START = signal_state.now()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A test that leaves a signal blocked or a SIGINT/SIGTERM handler changed (itself, or a
    fixture it set up or tore down: this runs after every teardown of the test, module and session
    fixtures' included) fails, named where it happened, and the state is put back: the processes
    later tests start would inherit a blocked or ignored SIGINT (tests/signal_state.py). One
    sigprocmask call a test; a hook, not an autouse fixture (about 0.2 ms a test in pytest's
    fixture machinery on this machine)."""
    yield
    if group_of(item) == "dask" and (nextitem is None or group_of(nextitem) != "dask"):
        close_dask_cluster()  # the last test of the "dask" group: see dask_cluster
    signal_state.put_back(SIGNALS_AT_START, "signals changed by this test or a fixture it set up "
                          "or tore down")


@pytest.fixture(autouse=True)
def notes_as_in_a_fresh_process():
    """Each test sees the once-per-process `note: --kernels` lines as a command run on its own
    would (src/kernels/costmodel.py note_once): without this, whether a test's stderr holds a
    note depends on which tests its xdist worker ran before it."""
    from src.kernels import costmodel
    costmodel._NOTED.clear()
    yield


# Dask's periodic work, which an idle cluster spends its CPU on: each process's event-loop tick
# check (every 20 ms by default), the workers' statistical profiler (every 10 ms), the system and
# nanny memory monitors (500 ms, 100 ms). Idle, the cluster took 3.1 s of CPU per 20 s of wall with
# the defaults and 0.4 s with these (2026-12-04, this 2-core machine, under load); what the tests
# check (same bytes, a killed worker restarted by its nanny) needs none of them. Set only while
# the cluster starts: the scheduler and nannies read them then, and each nanny hands its config
# to the worker processes it starts (a restart included).
QUIET_DASK = {"distributed.admin.tick.interval": "1s", "distributed.worker.profile.enabled": False,
              "distributed.admin.system-monitor.interval": "2s",
              "distributed.worker.memory.monitor-interval": "1s"}
_DASK = {}  # the open dask_cluster executor, closed after the last test of the "dask" group


@pytest.fixture(scope="session")
def dask_cluster():
    """One two-worker Dask LocalCluster on 127.0.0.1 (src/executor.py open_executor("local:2"))
    for every test that runs work on Dask: commands reach it through its address
    (`--dask tcp://...`, as they would a remote cluster). Closed as soon as the xdist worker's
    last test of the "dask" group is done (pytest_runtest_teardown above), not at the end of the
    session: idle, it kept costing CPU while the worker ran every other file."""
    import dask
    import distributed  # noqa: F401  (its defaults loaded first: config.set's exit restores them)

    from src.executor import open_executor

    with dask.config.set(QUIET_DASK):
        _DASK["ex"] = open_executor("local:2")
    try:
        yield _DASK["ex"]
    finally:
        close_dask_cluster()


def close_dask_cluster():
    ex = _DASK.pop("ex", None)
    if ex is not None:
        ex.close()

