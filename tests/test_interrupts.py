"""A Ctrl-C whose handler runs inside a ctypes callback (numba's first load of a cached function
calls back into Python through llvmlite: a run.py study went on after Ctrl-C, issue 26) still
stops the run: src/interrupts.py sends the signal again once the callback is over."""
from __future__ import annotations

import ctypes
import signal
import sys
import time

import pytest

from src.config import ConfigError
from src.interrupts import redelivered
from tests.helpers import run_main
from tests.signal_state import sigint_as_in_a_terminal


@pytest.fixture(autouse=True)
def sigint_raises_here():
    """These tests raise SIGINT in this process: it reaches Python's KeyboardInterrupt handler
    whatever the suite was started with (as a background job it inherits SIGINT ignored)."""
    with sigint_as_in_a_terminal():
        yield


def interrupted_inside_a_callback() -> None:
    """What the swallowed Ctrl-C did: SIGINT's handler runs inside Python code called from C."""
    def callback():
        signal.raise_signal(signal.SIGINT)  # the handler runs here, inside the callback

    ctypes.CFUNCTYPE(None)(callback)()


def test_a_ctrl_c_swallowed_in_a_callback_is_raised_after_it_and_not_printed(capsys):
    with pytest.raises(KeyboardInterrupt):
        with redelivered({KeyboardInterrupt: signal.SIGINT}):
            interrupted_inside_a_callback()
            time.sleep(5)  # the signal comes again within RETRY_S; sleep is interrupted by it
    assert "KeyboardInterrupt" not in capsys.readouterr().err


def test_other_unraisable_errors_still_reach_the_previous_hook(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))

    def callback():
        raise ValueError("from a callback")

    with redelivered({KeyboardInterrupt: signal.SIGINT}):
        ctypes.CFUNCTYPE(None)(callback)()
    assert [str(e) for e in seen] == ["from a callback"]


def test_run_py_exits_130_when_ctrl_c_lands_in_a_callback(capsys, monkeypatch):
    """Before src/interrupts.py the interrupt was lost and the command went on (here: to the
    usage error its input leads to, exit 2)."""
    import run

    def parse(argv):
        interrupted_inside_a_callback()
        time.sleep(5)
        raise ConfigError("--out", "not reached")

    monkeypatch.setattr(run.cli, "parse", parse)
    done = run_main(capsys, ["--quiet"])
    assert done.returncode == run.EXIT_INTERRUPTED, done
    assert done.stderr.splitlines() == ["interrupted; previous outputs left as they were"], \
        done.stderr
