"""One interface for a sweep's work: local worker processes (the default) or a Dask cluster.

The study's hardware grids (src/hardware/study.py), serve's (policy, rate) points
(src/online/study.py) and plan's capacity searches (src/plan/) hand a list of calls fn(*args) to an
Executor and get the results back in the order of that list, whatever order they finished in.
Every call is a pure function of its arguments (its random streams are keyed by what it computes,
src/workload.py `stream`), so a call may run anywhere, twice or after a crash, and give the same
bytes: which is what lets Dask retry a task whose worker died.

    LocalExecutor(workers)       one child process per call, up to `workers` at a time, each dying
                                 with this process (src/processes.py); workers 1: in this process
    DaskExecutor(client)         distributed.Client(...).submit, one task per call; a task whose
                                 worker dies is rerun on another

`open_executor(dask, workers)` picks one: `dask` None = local, "local:N" = a LocalCluster of N
worker processes on 127.0.0.1, anything else = the address of a running Dask scheduler
("tcp://host:8786"), checked by dask_option, which also records whether --dask or
$DASK_SCHEDULER_ADDRESS gave it; an address that does not answer as a Dask scheduler raises
ConfigError naming that input within 2 x (CONNECT_TIMEOUT_S + GRACE_S) (src/dask_address.py).
Dask is imported only when asked for.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Callable, Iterator

from src.dask_address import DaskAddress, dask_option

__all__ = ["DaskAddress", "DaskExecutor", "Executor", "LocalExecutor", "dask_option",
           "open_executor"]


class Executor:
    """Runs a list of calls; subclasses say where (`completed`)."""

    workers: int = 1
    label: str = "in this process"

    def completed(self, fn: Callable, arg_tuples: list[tuple]) -> Iterator[tuple[int, object]]:
        """Yield (i, fn(*arg_tuples[i])) as each call finishes."""
        raise NotImplementedError

    def map(self, fn: Callable, arg_tuples: list[tuple], on_done=None) -> list:
        """[fn(*a) for a in arg_tuples], in that order; on_done(i, result, done, total) after each
        call finishes (progress)."""
        results: list = [None] * len(arg_tuples)
        for done, (i, value) in enumerate(self.completed(fn, list(arg_tuples)), 1):
            results[i] = value
            if on_done is not None:
                on_done(i, value, done, len(arg_tuples))
        return results

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalExecutor(Executor):
    """Child processes of this one (src/processes.py), or this process for one worker."""

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.label = (f"{self.workers} local worker processes" if self.workers > 1
                      else "in this process")

    def completed(self, fn, arg_tuples):
        if self.workers == 1 or len(arg_tuples) <= 1:
            for i, args in enumerate(arg_tuples):
                yield i, fn(*args)
            return
        from src.processes import completed_in_processes

        yield from completed_in_processes(fn, arg_tuples, min(self.workers, len(arg_tuples)))


class DaskExecutor(Executor):
    """A Dask cluster through distributed.Client.submit; `cluster` (a LocalCluster this
    process started) is closed with the client. `timeout_s`: the longest wait for the next result
    (None: no limit), so a cluster that lost every worker cannot hang a run."""

    def __init__(self, client, cluster=None, retries: int = 2, timeout_s: float | None = None):
        self.client, self.cluster = client, cluster
        self.retries, self.timeout_s = retries, timeout_s
        info = client.scheduler_info()
        self.workers = max(1, sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()))
        where = "a LocalCluster on 127.0.0.1" if cluster is not None else client.scheduler.address
        self.label = f"Dask, {self.workers} worker threads ({where})"

    def completed(self, fn, arg_tuples):
        from distributed import as_completed

        # client.submit, not client.get_executor(): the concurrent.futures wrappers of
        # distributed's ClientExecutor are fed by a coroutine (cfexecutor._cascade_future) that,
        # for a task finishing while it is cancelled, gathers a cancelled future and makes tornado
        # log a FutureCancelledError traceback (seen on Ctrl-C, distributed 2026.8.0).
        # pure=False: each call is its own task (no deduplication by argument hash); retries: a
        # call that raised runs again (one whose worker died is rerun by the scheduler anyway)
        futures = [self.client.submit(fn, *args, pure=False, retries=self.retries)
                   for args in arg_tuples]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for future in as_completed(futures, timeout=self.timeout_s):
                yield index[future.key], future.result()
        finally:
            self.client.cancel(futures)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


@contextlib.contextmanager
def _sigint_blocked():
    """SIGINT blocked in this thread while a LocalCluster starts; a signal that comes meanwhile
    is delivered once it is unblocked.

    The cluster's threads (its event loop, the nannies' process threads) are created here and keep
    the blocked mask for good, and a worker process started from them (at start, or a restart
    after a worker died) inherits it through fork and exec (POSIX keeps the signal mask across
    execve), so Ctrl-C, which the terminal sends to the whole process group, reaches only this
    process: it raises KeyboardInterrupt here, and the workers, instead of each printing a
    traceback, are closed by the cluster as it shuts down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing's resource tracker, started with a worker's first spawn, unblocks SIGINT in
    # the thread that starts it (resource_tracker.ensure_running): start it here, before blocking
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def open_executor(dask: DaskAddress | str | None, workers: int | None = None,
                  timeout_s: float | None = None) -> Executor:
    """The executor a run's --dask value (see dask_option; a str is checked by it as --dask) and
    --workers ask for. A scheduler address that does not answer as a Dask scheduler raises
    ConfigError naming dask.source (src/dask_address.py connect_client)."""
    if isinstance(dask, str):
        dask = dask_option(dask)
    if dask is None:
        return LocalExecutor(workers)
    if dask.local_workers is not None:
        import logging

        from distributed import Client, LocalCluster

        # loopback only: workers, scheduler and its HTTP endpoint on 127.0.0.1 (a free port; the
        # bokeh dashboard is not installed). Logs at CRITICAL only: a task's exception comes back
        # to this process and is reported from here; what the cluster itself logs at ERROR is its
        # own shutdown races (a worker's heartbeat to a scheduler already closed, seen on Ctrl-C)
        with _sigint_blocked():
            cluster = LocalCluster(n_workers=dask.local_workers, threads_per_worker=1,
                                   processes=True, host="127.0.0.1",
                                   dashboard_address="127.0.0.1:0", silence_logs=logging.CRITICAL)
            client = Client(cluster)
        return DaskExecutor(client, cluster, timeout_s=timeout_s)
    from src.dask_address import connect_client

    return DaskExecutor(connect_client(dask), timeout_s=timeout_s)
