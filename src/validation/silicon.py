"""The silicon validation's table: one row per aggregated CSV row, its summary and its texts.

    error = predicted / measured - 1        (signed; |error| is what the summaries report)

Each row names the benchmark run it was simulated with (benchmark: "inferencex" or empty where
not established, range_ratio, prompts_per_client; src/validation/silicon_source.py).

Per system x engine x model: coverage = rows the model runs / rows, TPOT median and 90th
percentile |error|, TTFT median |error|. Rows fitted to (h100_sxm, src/validation/host_fit.py)
are marked `fitted`; the goal figures are read from the other rows only.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from src.validation.silicon_rows import FIT_SYSTEM, SiliconCase, reason_kind

# issue 23 section 4's goal (|error| medians and 90th percentile)
GOAL = {"tpot_median": 0.10, "tpot_p90": 0.25, "ttft_median": 0.20}
COLUMNS = ("id", "system", "backend", "backend_version", "model", "gpu", "engine", "tp", "ep",
           "attention_dp",
           "weight_format", "expert_weight_format", "isl", "osl", "concurrency", "benchmark",
           "range_ratio", "prompts_per_client", "fitted",
           "runnable", "refusal", "measured_tpot_ms", "predicted_tpot_ms", "tpot_error",
           "measured_ttft_ms", "predicted_ttft_ms", "ttft_error")


def relative_error(predicted: float, measured: float) -> float:
    """predicted / measured - 1 (nan where either is missing or measured <= 0)."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured <= 0:
        return math.nan
    return predicted / measured - 1.0


def table_row(row, mapped: SiliconCase | str, predicted: dict | str | None) -> dict:
    """The output row of one CSV row: its inputs, and the prediction or the refusal."""
    out = dict.fromkeys(COLUMNS, "")
    out.update(id=row["id"], system=row["system"], backend=row["backend"],
               backend_version=row["backend_version"], model=row["model_path"],
               fitted=row["system"] == FIT_SYSTEM, runnable=False,
               measured_tpot_ms=float(row["silicon_tpot_ms"]),
               measured_ttft_ms=float(row["silicon_ttft_ms"]),
               predicted_tpot_ms=math.nan, predicted_ttft_ms=math.nan, tpot_error=math.nan,
               ttft_error=math.nan, isl=row["isl"], osl=row["osl"],
               concurrency=row["batch_size"], tp=row["tp_size"], ep=row["moe_ep_size"],
               attention_dp=row["attention_dp_size"])
    if isinstance(mapped, SiliconCase):
        # an attention-DP row: tp the replica's GPUs, concurrency the global one (silicon_rows)
        out.update(gpu=mapped.gpu, engine=mapped.engine, tp=mapped.tp, ep=mapped.ep,
                   attention_dp=mapped.attention_dp, concurrency=mapped.concurrency,
                   weight_format=mapped.weight_format,
                   expert_weight_format=mapped.expert_weight_format,
                   benchmark=mapped.benchmark, range_ratio=mapped.range_ratio,
                   prompts_per_client=mapped.prompts_per_client)
    reason = mapped if isinstance(mapped, str) else predicted if isinstance(predicted, str) else ""
    if reason:
        out["refusal"] = reason
        return out
    if predicted is None:
        out["refusal"] = "not run: outside --systems (or --attention-dp-only)"
        return out
    out.update(runnable=True, predicted_tpot_ms=predicted["tpot_ms"],
               predicted_ttft_ms=predicted["ttft_ms"],
               tpot_error=relative_error(predicted["tpot_ms"], out["measured_tpot_ms"]),
               ttft_error=relative_error(predicted["ttft_ms"], out["measured_ttft_ms"]))
    return out


def _abs_stats(errors: pd.Series) -> tuple[float, float]:
    e = errors.dropna().abs()
    return (float(np.median(e)), float(np.percentile(e, 90))) if len(e) else (math.nan, math.nan)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per system x engine x model: rows, runnable, coverage, TPOT median / p90 |error|, TTFT
    median |error| (signed TPOT median too: the direction of the miss)."""
    rows = []
    for (system, backend, model), g in table.groupby(["system", "backend", "model"], sort=True):
        ok = g[g.runnable.astype(bool)]
        t50, t90 = _abs_stats(ok.tpot_error)
        f50, _ = _abs_stats(ok.ttft_error)
        rows.append({"system": system, "backend": backend, "model": model, "rows": len(g),
                     "runnable": len(ok), "coverage": len(ok) / len(g),
                     "tpot_median_abs_error": t50, "tpot_p90_abs_error": t90,
                     "tpot_median_error": float(ok.tpot_error.median()) if len(ok) else math.nan,
                     "ttft_median_abs_error": f50})
    return pd.DataFrame(rows)


def headline(table: pd.DataFrame) -> dict:
    """The goal's figures over the validation rows (every system but the fitted one)."""
    val = table[~table.fitted.astype(bool)]
    ok = val[val.runnable.astype(bool)]
    t50, t90 = _abs_stats(ok.tpot_error)
    f50, _ = _abs_stats(ok.ttft_error)
    return {"rows": len(val), "runnable": len(ok), "tpot_median": t50, "tpot_p90": t90,
            "ttft_median": f50}


def refusal_counts(table: pd.DataFrame) -> pd.Series:
    refused = table[~table.runnable.astype(bool)]
    return refused.refusal.map(reason_kind).value_counts()


def _pct(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.0f}%"


def summary_line(table: pd.DataFrame) -> str:
    """The line of results/summary.txt."""
    h = headline(table)
    return (f"Silicon validation (aiconfigurator-core 0.12.0 silicon_sample.csv, agg rows other "
            f"than h100_sxm, the host fit's set): {h['runnable']}/{h['rows']} rows run; greedy "
            f"TPOT |error| median {_pct(h['tpot_median'])}, p90 {_pct(h['tpot_p90'])} (goal 10%, "
            f"25%); TTFT median {_pct(h['ttft_median'])} (goal 20%)")


def markdown(table: pd.DataFrame) -> str:
    """design.md's block (silicon-validation), from results/silicon_validation.csv."""
    s = summary(table)
    s = s[s.runnable > 0]
    lines = [summary_line(table) + ".", "",
             "| system | backend | model | runnable / rows | TPOT median abs err | TPOT p90 | "
             "TPOT median signed | TTFT median abs err |", "|---|---|---|---|---|---|---|---|"]
    for r in s.itertuples():
        fit = " (fit set)" if r.system == FIT_SYSTEM else ""
        lines.append(f"| {r.system}{fit} | {r.backend} | {r.model} | {r.runnable} / {r.rows} | "
                     f"{_pct(r.tpot_median_abs_error)} | {_pct(r.tpot_p90_abs_error)} | "
                     f"{_pct(r.tpot_median_error)} | {_pct(r.ttft_median_abs_error)} |")
    counts = refusal_counts(table)
    lines += ["", "Refused rows: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + "."]
    return "\n".join(lines)
