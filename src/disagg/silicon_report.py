"""design.md's `silicon-disagg-validation` block from results/silicon_disagg_validation.csv.

The table `python run.py silicon-validate-disagg` writes (src/disagg/silicon.py): one line of
coverage and headline errors against issue 25's goal, a table per system x engine x model (rows
estimated / rows, TPOT and TTFT median |error|, p90, signed medians) and the refusals counted by
their kind (the reason's text up to the first ':'). Errors are predicted / measured - 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

GOAL = {"tpot_median": 0.12, "tpot_p90": 0.30, "ttft_median": 0.25}  # issue 25 section 3


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:.0%}"


def _signed(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:+.0%}"


def runnable(table: pd.DataFrame) -> pd.DataFrame:
    return table[table.runnable.astype(bool)]


def refusal_counts(table: pd.DataFrame) -> pd.Series:
    """Refused rows per kind, most first."""
    from src.validation.silicon_rows import reason_kind
    refused = table[~table.runnable.astype(bool)]
    return refused.refusal.astype(str).map(reason_kind).value_counts()


def errors(frame: pd.DataFrame) -> dict[str, float]:
    """TPOT median / p90 |error| and signed median, TTFT median |error| and signed median."""
    t = frame.tpot_error.astype(float).dropna()
    f = frame.ttft_error.astype(float).dropna()
    nan = float("nan")
    return {"tpot_median": float(t.abs().median()) if len(t) else nan,
            "tpot_p90": float(np.percentile(t.abs(), 90)) if len(t) else nan,
            "tpot_signed": float(t.median()) if len(t) else nan,
            "ttft_median": float(f.abs().median()) if len(f) else nan,
            "ttft_signed": float(f.median()) if len(f) else nan}


def headline(table: pd.DataFrame) -> str:
    ok = runnable(table)
    e = errors(ok)
    systems = " and ".join(sorted(map(str, table.system.unique())))
    return (f"Disaggregated silicon validation (aiconfigurator-core 0.12.0 silicon_sample.csv, "
            f"{systems} disagg rows, greedy, fitted to nothing): {len(ok)}/"
            f"{len(table)} rows estimated; TPOT |error| median {_pct(e['tpot_median'])}, p90 "
            f"{_pct(e['tpot_p90'])}, signed median {_signed(e['tpot_signed'])} (goal "
            f"{GOAL['tpot_median']:.0%}, {GOAL['tpot_p90']:.0%}); TTFT |error| median "
            f"{_pct(e['ttft_median'])}, signed median {_signed(e['ttft_signed'])} (goal "
            f"{GOAL['ttft_median']:.0%})")


def markdown(table: pd.DataFrame) -> str:
    """The block (module docstring)."""
    lines = [headline(table) + ".", "",
             "| system | engine | model | estimated / rows | TPOT median abs err | TPOT p90 | "
             "TPOT median signed | TTFT median abs err | TTFT median signed |",
             "|---|---|---|---|---|---|---|---|---|"]
    ok = runnable(table)
    for (system, backend, model), rows in table.groupby(["system", "backend", "model"]):
        mine = ok[(ok.system == system) & (ok.backend == backend) & (ok.model == model)]
        e = errors(mine)
        engine = mine.engine.iloc[0] if len(mine) else backend
        lines.append(f"| {system} | {engine} | {model} | {len(mine)} / {len(rows)} | "
                     f"{_pct(e['tpot_median'])} | {_pct(e['tpot_p90'])} | "
                     f"{_signed(e['tpot_signed'])} | {_pct(e['ttft_median'])} | "
                     f"{_signed(e['ttft_signed'])} |")
    counts = refusal_counts(table)
    lines += ["", "Refused rows: " + (", ".join(f"{k} {v}" for k, v in counts.items())
                                      or "none") + "."]
    return "\n".join(lines)
