"""numba's on-disk cache for the project's compiled loops, invalidated per group of files.

numba (`cache=True`) keys a function's cached machine code by its own source file only: after a
change to a function it calls from another file, a caller loads its old machine code, with the
old callee compiled into it (numba's documentation, "Cache invalidation"). Two compiled programs
span several files each, so this module gives the functions of each group one source stamp, a
hash of all the group's files, and a change to any of them recompiles the whole group once:
* the serving engine: src/online/counter_rng.py, kernel_attention.py, step_prices.py,
  engine_loop.py;
* the fixed-batch study loop: src/step_engine.py, which compiles the acceptance draws of
  src/acceptance.py and src/treeshape/accept.py into its loop.
The locator is numba's in-tree one (the `__pycache__` beside the source), registered first in
numba's list of locators (`CacheImpl._locator_classes`, a private list of numba 0.68, the version
requirements.txt pins) for these files only; every other file keeps numba's own. Each module that
compiles one of these files' functions imports this one before its first `njit`.
"""

from __future__ import annotations

import hashlib
import os

from numba.core.caching import CacheImpl, InTreeCacheLocator, UserProvidedCacheLocator

_SRC = os.path.dirname(os.path.abspath(__file__))
COMPILED_SOURCES = tuple(os.path.join(_SRC, "online", name) for name in (
    "counter_rng.py", "kernel_attention.py", "step_prices.py", "engine_loop.py"))
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
