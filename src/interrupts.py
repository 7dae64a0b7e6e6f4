"""A Ctrl-C (or SIGTERM) that Python would swallow is delivered again instead.

Python runs a signal's handler at the main thread's next check between bytecodes, wherever that
is. When it is inside a Python function called back from C through ctypes, the handler's
exception (KeyboardInterrupt, run.py's Terminated) cannot propagate: ctypes reports it as
"Exception ignored on calling ctypes callback function" (sys.unraisablehook, CPython
Modules/_ctypes/callbacks.c `_CallPythonObject`) and the C code carries on, so the run goes on as
if nothing happened. numba meets this on the first call of a cached function in a process:
llvmlite's object cache calls back into Python (`ExecutionEngine._raw_object_cache_notify`,
llvmlite 0.50.0 binding/executionengine.py) while numba 0.68.1 loads its runtime; a Ctrl-C at the
start of the reference study landed there in 1 of 39 tries under load and the study ran on
(issue 26).

`redelivered(signals)`: inside the block, such a swallowed interrupt is not printed; its signal is
sent to the main thread again RETRY_S later, from a timer thread (signal.pthread_kill), so the
handler runs at the main thread's next check, normally once the C code has returned, and the
exception propagates as usual. Sent from the hook itself, the handler would run inside the hook,
where its exception is swallowed too; a retry that lands in a callback again re-arms itself.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

RETRY_S = 0.01  # a pause, not a measured figure: long enough for the hook to have returned


@contextlib.contextmanager
def redelivered(signals: dict[type, int]) -> Iterator[None]:
    """{exception type a handler raises: its signal number}; see the module docstring."""
    previous = sys.unraisablehook
    main = threading.main_thread().ident

    def send_again(signum: int) -> None:
        threading.Timer(RETRY_S, signal.pthread_kill, (main, signum)).start()

    def hook(unraisable) -> None:
        signum = next((n for kind, n in signals.items() if isinstance(unraisable.exc_value, kind)),
                      None)
        if signum is None:
            previous(unraisable)
            return
        try:
            send_again(signum)
        except BaseException:  # the handler ran here after all (a second signal): again
            send_again(signum)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous
