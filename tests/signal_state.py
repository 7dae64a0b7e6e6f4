"""The SIGINT/SIGTERM state a test process hands on, and a child that takes Ctrl-C regardless.

A blocked or ignored signal survives fork and exec (POSIX), so whatever the test process holds,
every process a test starts holds too. A suite started as `python -m pytest &` from a
non-interactive shell (a CI script, nohup-style) inherits SIGINT ignored, the POSIX convention for
a background job, and so do its xdist workers: the tests that send a real Ctrl-C then saw run.py
ignore it and run to its end (exit 0), and a SIGINT raised in the test process did
nothing ("DID NOT RAISE"; issue 26, design.md section 12, "The test suite"). Hence:

* `now()` / `changed()` / `restore()` / `put_back()`: the main thread's blocked signals and the
  SIGINT and SIGTERM handlers, which tests/conftest.py checks after every test (a leak is named
  at the test that made it, not at a later test it breaks);
* `ctrl_c_as_in_a_terminal`: a subprocess preexec_fn giving the child SIGINT unblocked and at its
  default disposition, as a shell's foreground job has it (Python then installs its
  KeyboardInterrupt handler), for the tests whose point is a real Ctrl-C;
* `sigint_as_in_a_terminal()`: the same for the test process itself, for the length of a block.
"""
from __future__ import annotations

import _signal
import contextlib
import signal
from typing import Iterator, NamedTuple

import pytest


class State(NamedTuple):
    blocked: frozenset
    sigint: object
    sigterm: object


def now() -> State:
    """One syscall (the mask); the handlers are Python's own record of them. The C functions
    under `signal` (plain ints, no enum members): 1-2 microseconds, where signal.getsignal's
    conversion to `Handlers` (an exception caught for every Python handler) takes ~10 each."""
    return State(frozenset(_signal.pthread_sigmask(signal.SIG_BLOCK, ())),
                 _signal.getsignal(signal.SIGINT), _signal.getsignal(signal.SIGTERM))


def _name(handler) -> str:
    if isinstance(handler, int):  # SIG_DFL, SIG_IGN
        return signal.Handlers(handler).name
    return getattr(handler, "__qualname__", None) or repr(handler)


def changed(before: State, after: State | None = None) -> str | None:
    """What differs between before and after (default: now), in words; None if nothing does."""
    after = now() if after is None else after
    if after == before:
        return None
    what = []
    names = lambda signals: ", ".join(sorted(signal.Signals(s).name for s in signals))  # noqa: E731
    if after.blocked - before.blocked:
        what.append(f"left blocked: {names(after.blocked - before.blocked)}")
    if before.blocked - after.blocked:
        what.append(f"left unblocked: {names(before.blocked - after.blocked)}")
    for sig, old, new in (("SIGINT", before.sigint, after.sigint),
                          ("SIGTERM", before.sigterm, after.sigterm)):
        if new != old:
            what.append(f"{sig} handler {_name(old)} -> {_name(new)}")
    return "; ".join(what)


def restore(state: State) -> None:
    """Handlers first, then the mask: a signal that waited while blocked reaches the handler the
    state had."""
    for sig, handler in ((signal.SIGINT, state.sigint), (signal.SIGTERM, state.sigterm)):
        if handler is not None and signal.getsignal(sig) != handler:  # None: set outside Python
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, state.blocked)


def put_back(state: State, failure: str) -> None:
    """Nothing if the state is as `state`; else it is restored and the test fails with
    'failure: what changed'."""
    found = changed(state)
    if found:
        restore(state)
        pytest.fail(f"{failure}: {found}", pytrace=False)


def ctrl_c_as_in_a_terminal() -> None:
    """preexec_fn (runs in the child between fork and exec): SIGINT unblocked and SIG_DFL."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def sigint_as_in_a_terminal() -> Iterator[None]:
    """Inside: SIGINT unblocked in this thread and raising KeyboardInterrupt (Python's default
    handler); after: as it was."""
    before = now()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        restore(before)
