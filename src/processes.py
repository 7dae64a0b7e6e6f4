"""Work in other processes that never outlives the run that started it.

A child process ignores Ctrl-C (the parent handles it and ends the child) and ends when its parent
ends, however the parent ends, SIGKILL included: on Linux the kernel sends it SIGKILL when the
parent dies (prctl PR_SET_PDEATHSIG); elsewhere a thread in the child polls for its parent. The
parent's side: `Background` runs one call in a child, `map_in_processes` a few calls side by side;
both kill their children if the parent stops waiting (Ctrl-C, an error).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Call first thing in a child: ignore SIGINT, and end when the process parent_pid ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # Background.__init__ blocked it across the fork
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the parent died before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _child(conn, parent_pid: int, fn: Callable, args: tuple) -> None:
    die_with_parent(parent_pid)
    try:
        message = ("ok", fn(*args))
    except BaseException as exc:  # the parent re-raises it
        message = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    conn.send(message)
    conn.close()


def stderr_line(text: str) -> None:
    """text and its newline on stderr in one write, flushed. A process ended mid-print (a worker
    the parent kills) then leaves a whole line or none: print() writes the text and the newline
    separately when stderr is unbuffered (PYTHONUNBUFFERED=1), so the parent's last line could
    otherwise continue a worker's half line."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class WorkerError(RuntimeError):
    """The call in a child process raised; the message holds the child's traceback."""


class Background:
    """fn(*args) running in a child process; `result()` waits for it, `kill()` ends it."""

    def __init__(self, fn: Callable, *args: Any):
        self._receive, send = multiprocessing.Pipe(duplex=False)
        self._process = multiprocessing.Process(target=_child, args=(send, os.getpid(), fn, args),
                                                daemon=True)
        # SIGINT stays blocked from before the fork until the child ignores it: a Ctrl-C that
        # reaches the whole process group as the child starts would otherwise interrupt its start-up
        # (a traceback on stderr). The parent gets a pending Ctrl-C once start() returns.
        blocked = hasattr(signal, "pthread_sigmask")
        if blocked:
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._process.start()
        finally:
            if blocked:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        send.close()  # the child holds the only write end: its death reads as EOF here

    def result(self) -> Any:
        """fn's return value; WorkerError if it raised or the child died. Interruptible (Ctrl-C)."""
        try:
            status, value = self._receive.recv()
        except EOFError:
            self._process.join()
            raise WorkerError(f"worker process ended without a result (exit code "
                              f"{self._process.exitcode})") from None
        self._process.join()
        if status != "ok":
            raise WorkerError(value)
        return value

    @property
    def connection(self):
        """The end the result arrives on (for multiprocessing.connection.wait)."""
        return self._receive

    def kill(self) -> None:
        """End the child now (no-op if it has finished)."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join()


def completed_in_processes(fn: Callable, arg_tuples: list[tuple], workers: int):
    """Yield (i, fn(*arg_tuples[i])) as each finishes, up to `workers` child processes at a time,
    each call in its own child (a new one starts as soon as one ends). Children still running when
    the caller stops iterating (Ctrl-C, an error, a break) are killed."""
    from multiprocessing.connection import wait

    pending = list(enumerate(arg_tuples))[::-1]
    running: dict = {}  # connection -> (index, job)
    try:
        while pending or running:
            while pending and len(running) < workers:
                i, args = pending.pop()
                job = Background(fn, *args)
                running[job.connection] = (i, job)
            for conn in wait(list(running)):
                i, job = running.pop(conn)
                yield i, job.result()
    finally:
        for _, job in running.values():
            job.kill()


def map_in_processes(fn: Callable, arg_tuples: list[tuple], workers: int) -> list:
    """[fn(*a) for a in arg_tuples], up to `workers` at a time in child processes, in order."""
    results: list = []
    for start in range(0, len(arg_tuples), workers):
        jobs = []
        try:
            for args in arg_tuples[start:start + workers]:
                jobs.append(Background(fn, *args))
            results += [job.result() for job in jobs]
        finally:
            for job in jobs:
                job.kill()
    return results
