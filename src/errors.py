"""The project's one bad-input error (re-exported by src/config.py, where callers import it)."""
from __future__ import annotations


class ConfigError(ValueError):
    """Bad user input. str() is one line: '<field>: <what is allowed>'."""

    def __init__(self, field_name: str, allowed: str):
        super().__init__(f"{field_name}: {allowed}")
        self.field_name = field_name
        self.allowed = allowed
