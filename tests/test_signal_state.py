"""tests/signal_state.py: a changed SIGINT/SIGTERM state is named and put back, and a child started
with `ctrl_c_as_in_a_terminal` takes Ctrl-C even where this process ignores and blocks SIGINT (a
suite started as a background job inherits SIGINT ignored; issue 26)."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests import signal_state

# what the child reports: Python's KeyboardInterrupt handler installed? SIGINT blocked?
REPORT = ("import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
          "signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))")


def test_a_blocked_or_ignored_sigint_is_named_and_put_back():
    with signal_state.sigint_as_in_a_terminal():  # a known start, whatever the suite inherited
        before = signal_state.now()
        assert signal_state.changed(before) is None
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            what = signal_state.changed(before)
        finally:
            signal_state.restore(before)
        assert what == "left blocked: SIGINT; SIGINT handler default_int_handler -> SIG_IGN"
        assert signal_state.changed(before) is None and signal_state.now() == before


def test_put_back_fails_the_test_and_restores():
    before = signal_state.now()
    signal_state.put_back(before, "unchanged")  # nothing happens
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    with pytest.raises(pytest.fail.Exception, match="this test: SIGTERM handler .* -> .*lambda"):
        signal_state.put_back(before, "this test")
    assert signal_state.now() == before


def test_a_child_takes_ctrl_c_where_this_process_ignores_and_blocks_it():
    def child(**kw) -> str:
        return subprocess.run([sys.executable, "-S", "-c", REPORT], capture_output=True, text=True,
                              timeout=60, **kw).stdout.split()

    before = signal_state.now()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        inherited = child()
        as_in_a_terminal = child(preexec_fn=signal_state.ctrl_c_as_in_a_terminal)
    finally:
        signal_state.restore(before)
    assert inherited == ["False", "True"]  # what a plain child of such a process gets
    assert as_in_a_terminal == ["True", "False"]


def test_sigint_raises_inside_the_block_whatever_it_was_before():
    before = signal_state.now()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raised = False
        with signal_state.sigint_as_in_a_terminal():
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                raised = True
        assert raised and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal_state.restore(before)
