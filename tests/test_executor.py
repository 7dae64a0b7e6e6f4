"""src/executor.py: local processes and a two-worker Dask LocalCluster on 127.0.0.1 return the same
results in the same order; a worker killed mid-sweep loses and changes nothing (its task runs
again on a worker the nanny restarts) and the run does not hang (every wait is bounded)."""
import json
import os
import signal
import time

import pytest

from src.config import ConfigError
from src.executor import DaskExecutor, LocalExecutor, dask_option
from src.plan.search import Deployment, SearchTask, capacity_search

# cheap searches: an 8B model misses a 15 ms TPOT at every rate on these GPUs (tests/test_plan_cli);
# four, so that two workers are both busy when the first comes back (about 0.3 s CPU each)
TASKS = [SearchTask(Deployment(gpu, 1, "llama-3.1-8b", "llama-3.2-1b", "vllm-v1", "alpaca"),
                    policy, 2.0, 0.015, 0.9, 0.7, None, 10.0, 2, 0.1, 1.0, 3, 8)
         for gpu in ("l4", "a40") for policy in ("none", "fixed:3")]


def test_dask_option():
    assert dask_option(None) is None or "DASK_SCHEDULER_ADDRESS" in os.environ
    assert dask_option("local:2").address == "local:2"
    assert dask_option("tcp://127.0.0.1:8786").address == "tcp://127.0.0.1:8786"
    for bad in ("local:0", "local:x", "tcp://a b"):
        with pytest.raises(ConfigError, match="--dask"):
            dask_option(bad)


def test_dask_scheduler_address_from_the_environment(monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:8786")
    assert dask_option(None).address == "tcp://127.0.0.1:8786"
    assert dask_option("local:3").address == "local:3"  # the option wins
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "local:0")
    with pytest.raises(ConfigError, match="^DASK_SCHEDULER_ADDRESS: local:0"):
        dask_option(None)


def test_local_executor_keeps_the_order():
    ex = LocalExecutor(2)
    seen = []
    out = ex.map(divmod, [(7, 2), (9, 4), (1, 1)], on_done=lambda i, v, d, t: seen.append(d))
    assert out == [(3, 1), (2, 1), (1, 0)] and seen == [1, 2, 3]


@pytest.fixture(scope="module")
def reference():
    return LocalExecutor(1).map(capacity_search, [(t,) for t in TASKS])


def test_killed_worker_changes_and_loses_nothing(reference, dask_cluster):
    """Two workers on loopback (the shared open_executor("local:2"), tests/conftest.py); once the
    first search is back, the worker that is running a search is killed (SIGKILL): every result
    still comes back, equal to the local run's."""
    assert isinstance(dask_cluster, DaskExecutor)
    client = dask_cluster.client
    client.wait_for_workers(2, timeout=120)  # both (the nanny restarts a killed one)
    assert all(a.startswith("tcp://127.0.0.1:") for a in client.scheduler_info()["workers"])
    ex = DaskExecutor(client, timeout_s=240)  # the shared client, not closed here
    killed = []

    def kill_one(i, value, done, total):
        if killed or done == total:
            return
        busy = [w for w, keys in ex.client.processing().items() if keys]
        if busy:
            pid = ex.client.run(os.getpid, workers=[busy[0]])[busy[0]]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    start = time.perf_counter()
    results = ex.map(capacity_search, [(t,) for t in TASKS], on_done=kill_one)
    assert killed, "no worker was busy to kill"
    assert json.dumps(results) == json.dumps(reference)  # NaN-safe, exact floats
    assert time.perf_counter() - start < 240
