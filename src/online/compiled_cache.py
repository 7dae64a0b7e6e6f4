"""numba's on-disk cache for the compiled serving engine, invalidated as a whole.

numba (`cache=True`) keys a function's cached machine code by its own source file only: after a
change to a function it calls from another file, a caller loads its old machine code, with the
old callee compiled into it (numba's documentation, "Cache invalidation"). The engine's compiled
code spans four files (counter_rng.py, kernel_attention.py, step_prices.py, engine_loop.py), so
this module gives their functions one source stamp: a hash of all four files. A change to any of
them recompiles all of them once. The locator is numba's in-tree one (the `__pycache__` beside
the source), registered first in numba's list of locators (`CacheImpl._locator_classes`, a
private list of numba 0.68, the version requirements.txt pins) for these files only; every other
file keeps numba's own. Each of the four modules imports this one before its first `njit`.
"""

from __future__ import annotations

import hashlib
import os

from numba.core.caching import CacheImpl, InTreeCacheLocator, UserProvidedCacheLocator

_HERE = os.path.dirname(os.path.abspath(__file__))
COMPILED_SOURCES = tuple(os.path.join(_HERE, name) for name in (
    "counter_rng.py", "kernel_attention.py", "step_prices.py", "engine_loop.py"))


def sources_stamp() -> str:
    """sha256 of the four files' bytes, in a fixed order."""
    h = hashlib.sha256()
    for path in COMPILED_SOURCES:
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


class _EngineSourcesStamp:
    """For COMPILED_SOURCES only, stamped with all of them."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.abspath(py_file) not in COMPILED_SOURCES:
            return None
        return super().from_function(py_func, py_file)

    def get_source_stamp(self):
        return sources_stamp()


class EngineSourcesLocator(_EngineSourcesStamp, InTreeCacheLocator):
    """numba's in-tree locator (`__pycache__` beside the source)."""


class EngineSourcesUserLocator(_EngineSourcesStamp, UserProvidedCacheLocator):
    """numba's locator for a NUMBA_CACHE_DIR, where one is set."""


for _cls in (EngineSourcesLocator, EngineSourcesUserLocator):  # the user's dir first
    if _cls not in CacheImpl._locator_classes:
        CacheImpl._locator_classes.insert(0, _cls)
