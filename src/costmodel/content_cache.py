"""Results of loading the presets and engine profiles kept: by arguments within a
memo_presets() block (a batch of checks), and by the bytes of the files they read (by_content:
every cost model built loads them, thousands of times a test run)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

from src.errors import ConfigError
from src.input_files import MAX_TOML_BYTES, read_file_bytes

# load_presets / load_engine_profiles results by arguments while memo_presets() is open (None:
# closed; each call then checks the files' bytes, by_content, so an edited file is seen)
_MEMO: dict | None = None


@contextmanager
def memo_presets():
    """Within the block, load_presets and load_engine_profiles return the same result for the same
    arguments: a batch of checks (plan's memory checks, ~4 loads each) reads the files once."""
    global _MEMO
    outer = _MEMO
    _MEMO = {} if outer is None else outer
    try:
        yield
    finally:
        _MEMO = outer


def memoised(key: tuple, load):
    """load(), or its result for `key` kept while memo_presets() is open."""
    if _MEMO is None:
        return load()
    if key not in _MEMO:
        _MEMO[key] = load()
    return _MEMO[key]


# load()'s results by the bytes of the files it reads (by_content): a test run builds thousands
# of cost models, each reading the presets (~3.6 ms of parsing and checks) and engine profiles
# (~1.9 ms); reading the files' bytes again takes ~0.1 ms. Kept small: a new file content is a
# new entry (the oldest goes).
_BY_CONTENT: dict = {}
_BY_CONTENT_MAX = 16


def by_content(key: tuple, files: Iterable[Path], load):
    """load(), or the result it gave for `key` when `files` held the bytes they hold now (an
    edited file is seen at the next call, as without a cache). A file that cannot be read (or
    is not a plain file) is left to load(), whose error names it; a load() that raises is not
    kept. The result is shared: load() must return immutable values (or the caller copies)."""
    try:
        stamp = tuple((str(p), read_file_bytes(p, "presets", "a TOML file", ConfigError,
                                               MAX_TOML_BYTES)) for p in files)
    except ConfigError:
        return load()
    entry = (key, stamp)
    if entry not in _BY_CONTENT:
        value = load()
        if len(_BY_CONTENT) >= _BY_CONTENT_MAX:
            del _BY_CONTENT[next(iter(_BY_CONTENT))]
        _BY_CONTENT[entry] = value
    return _BY_CONTENT[entry]
