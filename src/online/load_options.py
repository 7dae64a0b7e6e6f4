"""The closed-loop load options of `serve`: --concurrency's client counts and --workload's
fixed:ISL:OSL lengths, each validated at the edge (ConfigError naming the flag)."""

from __future__ import annotations

from typing import Any

from src.config import ConfigError, list_items

MAX_CONCURRENCY = 65536
MAX_FIXED_TOKENS = 1_000_000  # a fixed:ISL:OSL length's cap (any model's context is below it)


def _ascii_int(flag: str, item: str, low: int, high: int, what: str) -> int:
    """An integer written in ASCII digits only (no sign, space, underscore or other script's
    digits, all of which int() takes), within low..high; ConfigError naming `flag` otherwise."""
    item = str(item).strip()
    if not (item.isascii() and item.isdigit()) or len(item) > len(str(high)):
        raise ConfigError(flag, f"'{item}' is not {what}; allowed: integers {low}..{high}")
    v = int(item)
    if not low <= v <= high:
        raise ConfigError(flag, f"{v} is out of range; allowed: {what}, {low}..{high}")
    return v


def parse_concurrency(flag: str, value: Any) -> tuple[int, ...]:
    """'1,8,64' -> (1, 8, 64): closed-loop clients per point, sorted, each listed once."""
    raw = value if isinstance(value, list) else str(value)
    items = list_items(flag, raw, "client counts, e.g. 1,8,64")
    out = [_ascii_int(flag, i, 1, MAX_CONCURRENCY, "a number of clients") for i in items]
    if len(set(out)) != len(out):
        raise ConfigError(flag, "a concurrency is listed twice")
    return tuple(sorted(out))


def parse_fixed_workload(flag: str, text: str):
    """'fixed:ISL:OSL' -> (FixedLength(ISL), FixedLength(OSL)): every request has ISL prompt and
    OSL output tokens, as the benchmarks' random datasets with range ratio 1."""
    from src.config import FixedLength
    parts = text.split(":")
    if len(parts) != 3:
        raise ConfigError(flag, f"'{text}': allowed: fixed:ISL:OSL, e.g. fixed:1024:1024")
    isl = _ascii_int(flag, parts[1], 1, MAX_FIXED_TOKENS, "a prompt length in tokens")
    # at least 2 output tokens: TPOT and ITL are the gaps between a request's output tokens
    osl = _ascii_int(flag, parts[2], 2, MAX_FIXED_TOKENS,
                     "an output length in tokens (TPOT needs at least 2)")
    return FixedLength(isl), FixedLength(osl)
