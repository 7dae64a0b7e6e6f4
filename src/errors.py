"""The project's one bad-input error (re-exported by src/config.py, where callers import it), and
the one reading of a number from text (command line or input file): ASCII digits only."""
from __future__ import annotations

import re

_ASCII_INT = re.compile(r"[+-]?[0-9]+")


class ConfigError(ValueError):
    """Bad user input. str() is one line: '<field>: <what is allowed>'."""

    def __init__(self, field_name: str, allowed: str):
        super().__init__(f"{field_name}: {allowed}")
        self.field_name = field_name
        self.allowed = allowed


def _not_ascii(value: str, kind: str) -> ValueError:
    return ValueError(f"{value!r} is not {kind} in ASCII digits")


def ascii_int(value) -> int:
    """int(value), text read as an optional sign and the ASCII digits 0-9 only (spaces around
    allowed). Python's int() also reads other scripts' digits ('٣' -> 3, while '²' passes
    str.isdigit() and then fails) and '_' separators: a command line or a file must mean what it
    shows. ValueError otherwise, as int() raises; a non-text value goes to int() unchanged."""
    if isinstance(value, str):
        if not (value.isascii() and _ASCII_INT.fullmatch(value.strip())):
            raise _not_ascii(value, "an integer")
    return int(value)


def ascii_float(value) -> float:
    """float(value), text in ASCII only, without '_' separators (float() reads '٣.5' as 3.5 and
    '1_0' as 10.0). ValueError otherwise; a non-text value goes to float() unchanged."""
    if isinstance(value, str) and not (value.isascii() and "_" not in value):
        raise _not_ascii(value, "a number")
    return float(value)
