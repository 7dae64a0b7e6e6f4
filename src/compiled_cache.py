"""numba's on-disk cache for the project's compiled loops, invalidated per group of files.

numba (`cache=True`) keys a function's cached machine code by its own source file only: after a
change to a function it calls from another file, a caller loads its old machine code, with the
old callee compiled into it (numba's documentation, "Cache invalidation"). Two compiled programs
span several files each, so this module gives the functions of each group one source stamp, a
hash of all the group's files, and a change to any of them recompiles the whole group once:
* the serving engine: src/online/counter_rng.py, kernel_attention.py, moe_prices.py,
  step_prices.py, engine_loop.py;
* the fixed-batch study loop: src/step_engine.py, which compiles the acceptance draws of
  src/acceptance.py and src/treeshape/accept.py into its loop.
The locator is numba's in-tree one (the `__pycache__` beside the source), registered first in
numba's list of locators (`CacheImpl._locator_classes`, a private list of numba 0.68, the version
requirements.txt pins) for these files only; every other file keeps numba's own. Each module that
compiles one of these files' functions imports this one before its first `njit`.

`compile_once` makes a cold cache compile once per machine rather than once per worker process:
the parent compiles (behind a file lock, so two commands started together compile once too and
the second loads what the first wrote) before it starts any worker, and says on stderr that it
does and for about how long; every worker then loads the cache.

`compiled_callee` compiles a function that only compiled code calls (every function of the
serving engine but its entry point, engine_loop.run_rows): numba builds no CPython wrapper and no
C-callable wrapper for it (the `no_cpython_wrapper` / `no_cfunc_wrapper` options its own
`@overload`s use), which saves about a fifth of the engine's cold compile (26.9 -> 21.9 s of one
core, 2026-12-03). Such a function cannot be called from Python (numba would jump to a wrapper
that does not exist: a segmentation fault); `python_callable` gives a twin that can (tests).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
import types
from typing import Callable

from numba import njit
from numba.core.caching import CacheImpl, InTreeCacheLocator, UserProvidedCacheLocator

_SRC = os.path.dirname(os.path.abspath(__file__))
COMPILED_SOURCES = tuple(os.path.join(_SRC, "online", name) for name in (
    "counter_rng.py", "kernel_attention.py", "moe_prices.py", "step_prices.py",
    "engine_loop.py"))
STUDY_LOOP_SOURCES = tuple(os.path.join(_SRC, *name.split("/")) for name in (
    "step_engine.py", "acceptance.py", "treeshape/accept.py"))
_GROUP_OF = {path: group for group in (COMPILED_SOURCES, STUDY_LOOP_SOURCES) for path in group}


def sources_stamp(paths: tuple[str, ...] = COMPILED_SOURCES) -> str:
    """sha256 of a group's files' bytes, in a fixed order (default: the serving engine's)."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


class _EngineSourcesStamp:
    """For the files of a group only, stamped with all the group's files."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.abspath(py_file) not in _GROUP_OF:
            return None
        return super().from_function(py_func, py_file)

    def get_source_stamp(self):
        return sources_stamp(_GROUP_OF[os.path.abspath(self._py_file)])


class EngineSourcesLocator(_EngineSourcesStamp, InTreeCacheLocator):
    """numba's in-tree locator (`__pycache__` beside the source)."""


class EngineSourcesUserLocator(_EngineSourcesStamp, UserProvidedCacheLocator):
    """numba's locator for a NUMBA_CACHE_DIR, where one is set."""


for _cls in (EngineSourcesLocator, EngineSourcesUserLocator):  # the user's dir first
    if _cls not in CacheImpl._locator_classes:
        CacheImpl._locator_classes.insert(0, _cls)


def compiled_callee(py_func):
    """njit(cache=True) without the wrappers a call from Python needs (module docstring)."""
    return njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)(py_func)


_TWINS: dict = {}


def python_callable(callee):
    """A twin of a `compiled_callee` function that Python can call, with its wrappers, cached
    under its own entry: a copy of the function named `<name>__python_twin` (numba names a cache
    entry by the function's qualified name and first line, so the callee's own entry, whose
    machine code has no wrappers, is never shared). A process loads it instead of compiling it
    (~3.5 s of CPU per test process for step_prices' three twins, 2026-12-03)."""
    if callee not in _TWINS:
        f = callee.py_func
        twin = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__,
                                  f.__closure__)
        twin.__qualname__ = f"{f.__qualname__}__python_twin"
        twin.__module__, twin.__doc__ = f.__module__, f.__doc__
        _TWINS[callee] = njit(cache=True)(twin)
    return _TWINS[callee]


def cache_is_warm(dispatcher) -> bool:
    """Whether numba's cache holds machine code of `dispatcher` (an njit function with
    cache=True) for its files' present source stamp (numba's private index file of 0.68)."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except (OSError, EOFError, AttributeError, ValueError):
        return False


def compile_once(is_warm: Callable[[], bool], compile_: Callable[[], None], lock_path: str,
                 say: Callable[[str], None], what: str, about_s: float) -> bool:
    """Run compile_() unless is_warm(); under an exclusive lock on lock_path, rechecked after the
    lock is taken (another process may have compiled meanwhile). say() gets one line before the
    compile ("about_s" of one core is the estimate it gives) and one after. Returns whether this
    call compiled."""
    if is_warm():
        return False
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if is_warm():
            return False
        say(f"compiling {what} once (numba; about {about_s:.0f} s of one core; later runs load "
            "the cache)")
        start = time.perf_counter()
        compile_()
        say(f"  compiled in {time.perf_counter() - start:.1f} s")
    return True
