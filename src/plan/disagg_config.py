"""A plan file's `[disagg]` table: the disaggregated (xPyD) shapes `plan` searches beside the
aggregated replicas of its [plan] table.

    [disagg]
    prefill_workers = [1, 2]          # x: prefill worker counts
    prefill = ["tp8 ep8"]             # prefill worker shapes: tpN dpN epN (absent: 1)
    decode_workers = [1, 2]           # y: decode worker counts
    decode = ["dp8 ep8", "tp8 ep8"]   # decode worker shapes
    kv_link = "auto"                  # auto, nvlink, network, none (src/disagg/config.py)

Every (prefill_workers, prefill, decode_workers, decode) combination is a candidate, on every
GPU, pair, engine and workload of the plan, with every policy of the plan on the decode pool.
A shape's words follow src/disagg/config.py (tp: attention TP inside a DP rank, dp: attention
DP ranks, ep: 1 or tp x dp); whether it suits a model (heads, experts, memory) is checked per
deployment, and a shape that does not is skipped with the reason. Bad syntax: ConfigError
naming disagg.KEY.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Mapping

from src.config import ConfigError

DISAGG_PLAN_KEYS = ("prefill_workers", "prefill", "decode_workers", "decode", "kv_link")
SHAPE_WORD = re.compile(r"(tp|dp|ep)([0-9]+)")
MAX_WORKERS = 64  # workers of one pool (a plan's candidate, not a limit of any engine)


@dataclass(frozen=True)
class WorkerShape:
    """One worker: tp x dp GPUs, ep in {1, tp x dp} (checked against the model later)."""

    tp: int = 1
    dp: int = 1
    ep: int = 1

    def label(self) -> str:
        words = [f"tp{self.tp}" if self.tp > 1 or self.dp == 1 else "",
                 f"dp{self.dp}" if self.dp > 1 else "", f"ep{self.ep}" if self.ep > 1 else ""]
        return " ".join(w for w in words if w)


@dataclass(frozen=True)
class DisaggCandidate:
    """One xPyD shape: prefill_workers x prefill shape, decode_workers x decode shape."""

    prefill_workers: int
    prefill: WorkerShape
    decode_workers: int
    decode: WorkerShape
    kv_link: str

    @property
    def gpus(self) -> int:
        return (self.prefill_workers * self.prefill.tp * self.prefill.dp
                + self.decode_workers * self.decode.tp * self.decode.dp)

    def label(self) -> str:
        return (f"{self.prefill_workers}P({self.prefill.label()})+"
                f"{self.decode_workers}D({self.decode.label()})")

    def table(self, prefill_workers: int | None = None) -> dict:
        """The scenario [disagg] table of this shape (prefill_workers overridden where given)."""
        p, d = self.prefill, self.decode
        return {"prefill_workers": self.prefill_workers if prefill_workers is None
                else prefill_workers, "prefill_tp": p.tp, "prefill_dp": p.dp,
                "prefill_ep": p.ep, "decode_workers": 1, "decode_tp": d.tp, "decode_dp": d.dp,
                "decode_ep": d.ep, "kv_link": self.kv_link}


@dataclass(frozen=True)
class DisaggPlan:
    """The validated [disagg] table of a plan file."""

    prefill_workers: tuple[int, ...]
    prefill: tuple[WorkerShape, ...]
    decode_workers: tuple[int, ...]
    decode: tuple[WorkerShape, ...]
    kv_link: str = "auto"

    def candidates(self) -> list[DisaggCandidate]:
        return [DisaggCandidate(x, p, y, d, self.kv_link) for x, p, y, d in itertools.product(
            self.prefill_workers, self.prefill, self.decode_workers, self.decode)]


def _list(key: str, value: Any) -> list:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"disagg.{key}", f"expected a non-empty TOML list, got {value!r}")
    if len(set(map(repr, value))) != len(value):
        raise ConfigError(f"disagg.{key}", "a value is listed twice")
    return value


def parse_shape(key: str, text: Any) -> WorkerShape:
    """'tp8 ep8', 'dp8 ep8', 'tp2 dp4 ep8' -> WorkerShape; ConfigError(disagg.KEY) otherwise."""
    example = "e.g. \"tp8 ep8\" or \"dp8 ep8\" (words tpN, dpN, epN; absent: 1)"
    if not isinstance(text, str) or not text.split():
        raise ConfigError(f"disagg.{key}", f"{text!r} is not a worker shape; {example}")
    seen = {}
    for word in text.split():
        m = SHAPE_WORD.fullmatch(word)
        if not m or m.group(1) in seen or not 1 <= int(m.group(2)) <= 64:
            raise ConfigError(f"disagg.{key}", f"{text!r}: bad word {word!r}; {example}, each "
                                               "word once, N 1..64")
        seen[m.group(1)] = int(m.group(2))
    return WorkerShape(**seen)


def parse_disagg_plan(table: Any) -> DisaggPlan:
    """The plan file's [disagg] table, validated (module docstring)."""
    from src.disagg.config import KV_LINKS

    if not isinstance(table, Mapping):
        raise ConfigError("disagg", "expected a table")
    for key in table:
        if key not in DISAGG_PLAN_KEYS:
            raise ConfigError(f"disagg.{key}", "unknown key; allowed: "
                                               + ", ".join(DISAGG_PLAN_KEYS))
    for key in ("prefill", "decode"):
        if key not in table:
            raise ConfigError(f"disagg.{key}", "required: a list of worker shapes, e.g. "
                                               f"{key} = [\"tp8 ep8\"]")
    counts = {}
    for key in ("prefill_workers", "decode_workers"):
        items = _list(key, table.get(key, [1]))
        for v in items:
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_WORKERS:
                raise ConfigError(f"disagg.{key}", f"{v!r} is not a worker count; allowed: "
                                                   f"integers 1..{MAX_WORKERS}")
        counts[key] = tuple(items)
    shapes = {key: tuple(parse_shape(key, v) for v in _list(key, table[key]))
              for key in ("prefill", "decode")}
    link = table.get("kv_link", "auto")
    if link not in KV_LINKS:
        raise ConfigError("disagg.kv_link", f"unknown {link!r}; allowed: {', '.join(KV_LINKS)}")
    return DisaggPlan(counts["prefill_workers"], shapes["prefill"], counts["decode_workers"],
                      shapes["decode"], link)
