"""The one reader of every input file (configs, scenarios, presets, traces, /metrics snapshots,
measurements): a path is read only if it is a regular file of at most a stated size.

A symlink to /dev/zero, a FIFO, a device or a socket is refused before it is opened (os.stat),
and the file is opened with O_NONBLOCK, so a FIFO swapped in after the check cannot block the
open either; at most cap + 1 bytes are read, so a file that grows while it is read cannot exhaust
memory. Each refusal is one ConfigError line naming the option (or file key) that gave the path.
"""
from __future__ import annotations

import functools
import os
import stat
import tomllib

from src.errors import ConfigError

MIB = 1 << 20
# TOML inputs (configs, scenarios, presets, engine profiles) are a few KiB; tomllib is pure Python
# (~2 s a MiB), so 4 MiB keeps a refusal or a parse within seconds.
MAX_TOML_BYTES = 4 * MIB
# CSV and text inputs: a trace of 1e6 requests (serve's --requests cap) at ~40 bytes a row is
# ~40 MiB; measurement files and /metrics snapshots are far smaller.
MAX_TEXT_BYTES = 64 * MIB

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path, mode: int, expected: str) -> str:
    if stat.S_ISDIR(mode):
        return f"{path} is a folder; expected {expected}"
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{path} is {kind}, not a regular file; expected {expected}"


def _too_large(path, max_bytes: int, expected: str) -> str:
    return (f"{path} is larger than {max_bytes // MIB} MiB, the most this option reads; "
            f"expected {expected}")


def read_file_bytes(path, field_name: str, expected: str, error: type[ConfigError] = ConfigError,
                    max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; error(field_name, ...) saying why not
    (missing, a folder, a FIFO or device, too large, unreadable) and what was `expected`."""
    if "\0" in os.fsdecode(path):  # os.stat would raise ValueError
        raise error(field_name, f"file not found: {path!r}")
    try:
        mode_size = os.stat(path)
        if not stat.S_ISREG(mode_size.st_mode):
            raise error(field_name, _not_regular(path, mode_size.st_mode, expected))
        if mode_size.st_size > max_bytes:
            raise error(field_name, _too_large(path, max_bytes, expected))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode  # what was opened, if the path changed meanwhile
            if not stat.S_ISREG(mode):
                raise error(field_name, _not_regular(path, mode, expected))
            data = f.read(max_bytes + 1)
    except (FileNotFoundError, NotADirectoryError):
        raise error(field_name, f"file not found: {path}") from None
    except OSError as e:
        raise error(field_name, f"cannot read {path} ({e.strerror or e})") from None
    if len(data) > max_bytes:
        raise error(field_name, _too_large(path, max_bytes, expected))
    return data


def read_text_file(path, field_name: str, expected: str, error: type[ConfigError] = ConfigError,
                   max_bytes: int = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file's contents (line ends as open() in text mode gives them: \\r\\n and \\r
    become \\n); error(field_name, ...) saying why it cannot be read (read_file_bytes) or that
    it is not UTF-8 text, and what was expected ("a CSV file")."""
    data = read_file_bytes(path, field_name, expected, error, max_bytes)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(field_name, f"{path} is not UTF-8 text; expected {expected}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


@functools.lru_cache(maxsize=64)
def _parse_toml(data: bytes) -> dict:
    """tomllib's parse of a file's bytes, kept by content: the presets are read many times per run
    (every cost model built reads them), and tomllib is pure Python (~0.5 ms a file)."""
    return tomllib.loads(data.decode("utf-8"))


def _copied(value):
    """A copy of a parsed TOML value: TOML's containers are dicts and lists, everything else
    (str, int, float, bool, datetime) is immutable; ~10x faster than copy.deepcopy, which the
    presets' many reads spent most of their time in."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value


def read_toml(path, field_name: str, error: type[ConfigError] = ConfigError) -> dict:
    """A TOML file as a dict; error(field_name, ...) when it cannot be read (read_file_bytes, at
    most MAX_TOML_BYTES) or parsed. The one TOML reader of the project: configs, scenarios,
    presets and engine profiles all come here."""
    data = read_file_bytes(path, field_name, "a TOML file", error, MAX_TOML_BYTES)
    try:
        return _copied(_parse_toml(data))  # a copy: callers may change theirs
    except UnicodeDecodeError:
        raise error(field_name, f"{path} is not UTF-8 text; expected a TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise error(field_name, f"{path} is not valid TOML ({e})") from None
