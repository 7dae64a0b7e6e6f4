"""One interface for a sweep's work: local worker processes (the default) or a Dask cluster.

The study's hardware grids (src/hardware/study.py), serve's (policy, rate) points
(src/online/study.py) and plan's capacity searches (src/plan/) hand a list of calls fn(*args) to an
Executor and get the results back in the order of that list, whatever order they finished in.
Every call is a pure function of its arguments (its random streams are keyed by what it computes,
src/workload.py `stream`), so a call may run anywhere, twice or after a crash, and give the same
bytes: which is what lets Dask retry a task whose worker died.

    LocalExecutor(workers)       one child process per call, up to `workers` at a time, each dying
                                 with this process (src/processes.py); workers 1: in this process
    DaskExecutor(client)         distributed.Client(...).get_executor(), a concurrent.futures
                                 Executor; a task whose worker dies is rerun on another

`open_executor(dask, workers)` picks one: `dask` None = local, "local:N" = a LocalCluster of N
worker processes on 127.0.0.1, anything else = the address of a running Dask scheduler
("tcp://host:8786"); it raises ConfigError on --dask within CONNECT_TIMEOUT_S when no scheduler
answers. Dask is imported only when asked for.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
from typing import Callable, Iterator

from src.config import ConfigError

CONNECT_TIMEOUT_S = 5.0  # how long a --dask address gets to answer
DASK_ENV = "DASK_SCHEDULER_ADDRESS"
MAX_LOCAL_WORKERS = 256
_LOCAL = re.compile(r"local:([0-9]+)")  # [0-9], not \d: ASCII digits only (src/errors.py)
_ADDRESS = re.compile(r"((tcp|tls|inproc|ucx|ws|wss)://)?[A-Za-z0-9._\-\[\]:]+(:[0-9]+)?")


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
    """A Dask cluster through distributed.Client.get_executor(); `cluster` (a LocalCluster this
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
        import concurrent.futures as cf

        # pure=False: each call is its own task (no deduplication by argument hash); retries:
        # a call that raised runs again (one whose worker died is rerun by the scheduler anyway)
        executor = self.client.get_executor(pure=False, retries=self.retries)
        futures = {executor.submit(fn, *args): i for i, args in enumerate(arg_tuples)}
        try:
            for future in cf.as_completed(futures, timeout=self.timeout_s):
                yield futures[future], future.result()
        finally:
            # cancel the Dask futures, not the concurrent.futures wrappers: a wrapper cancelled
            # here while its task finishes makes distributed's callback set a result on a
            # cancelled future, which it logs as an InvalidStateError traceback (seen on Ctrl-C)
            executor.shutdown(wait=False)

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def dask_option(value: str | None) -> str | None:
    """The --dask value, else $DASK_SCHEDULER_ADDRESS, else None (local processes); checked."""
    if value is None:
        value = os.environ.get(DASK_ENV) or None
        flag = DASK_ENV
    else:
        flag = "--dask"
    if value is None:
        return None
    value = value.strip()
    m = _LOCAL.fullmatch(value)
    if m:
        n = int(m.group(1))
        if not 1 <= n <= MAX_LOCAL_WORKERS:
            raise ConfigError(flag, f"local:{n}: allowed local:1..local:{MAX_LOCAL_WORKERS}")
        return value
    if value.startswith("local") or not _ADDRESS.fullmatch(value):
        raise ConfigError(flag, f"'{value}' is neither local:N (N worker processes here) nor a "
                                "scheduler address such as tcp://127.0.0.1:8786")
    return value


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


def open_executor(dask: str | None, workers: int | None = None,
                  timeout_s: float | None = None) -> Executor:
    """The executor a run's --dask value (see dask_option) and --workers ask for. A Dask address
    that does not answer within CONNECT_TIMEOUT_S raises ConfigError('--dask', ...)."""
    if dask is None:
        return LocalExecutor(workers)
    import logging

    from distributed import Client, LocalCluster

    m = _LOCAL.fullmatch(dask)
    if m:
        # loopback only: workers, scheduler and its HTTP endpoint on 127.0.0.1 (a free port; the
        # bokeh dashboard is not installed)
        with _sigint_blocked():
            cluster = LocalCluster(n_workers=int(m.group(1)), threads_per_worker=1,
                                   processes=True, host="127.0.0.1",
                                   dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
            client = Client(cluster)
        return DaskExecutor(client, cluster, timeout_s=timeout_s)
    try:
        client = Client(dask, timeout=CONNECT_TIMEOUT_S)
    except (OSError, ValueError, TypeError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError("--dask", f"no Dask scheduler answered at {dask} within "
                                    f"{CONNECT_TIMEOUT_S:g} s ({why[:120]}); start one "
                                    "(`dask scheduler`), or use --dask local:N") from None
    return DaskExecutor(client, timeout_s=timeout_s)
