"""Engine host terms fitted to the H100 rows of silicon_sample.csv only.

Measured kernels leave out an engine's CPU work (scheduling, input preparation, sampling, launch
gaps). Per engine profile, `step_cpu_fixed_ms` and `step_cpu_per_seq_ms` (EngineProfile,
src/costmodel/engines.py) are fitted to the greedy TPOT of every runnable h100_sxm row:

    objective = sum over rows of ln(predicted TPOT / measured TPOT)^2

by coordinate search (FIXED_GRID_MS at the profile's per-sequence term, then PER_SEQ_GRID_MS
at the best fixed term; each point one closed-loop serving run per row, silicon_serve.predict).
Draft-pass terms are not identifiable from greedy rows and keep the profile's values. Rows of
any other system (H200, B200, GB200) are the validation and never reach `fit_rows`.
The result is data: src/presets/host_fits.toml, with the rows used, the objective and residual.
"""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

from src.validation.silicon_rows import FIT_SYSTEM, SiliconCase

HOST_FITS_PATH = Path(__file__).resolve().parents[1] / "presets" / "host_fits.toml"
FIXED_GRID_MS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0)
PER_SEQ_GRID_MS = (0.0, 0.005, 0.01, 0.02, 0.04, 0.08)


def fit_rows(cases: list[SiliconCase]) -> list[SiliconCase]:
    """The cases a fit may read: h100_sxm only."""
    return [c for c in cases if c.system == FIT_SYSTEM]


def log_objective(cases, terms: dict, predict) -> tuple[float, int]:
    """(sum of squared ln(pred / measured) TPOT, rows that ran)."""
    total, n = 0.0, 0
    for c in cases:
        p = predict(c, terms)
        if isinstance(p, dict) and p["tpot_ms"] > 0 and c.measured_tpot_ms > 0:
            total += math.log(p["tpot_ms"] / c.measured_tpot_ms) ** 2
            n += 1
    return total, n


def fit_engine(cases: list[SiliconCase], start: dict, predict, say=lambda m: None) -> dict:
    """Fitted {step_cpu_fixed_ms, step_cpu_per_seq_ms} of one engine from its H100 cases, with
    the rows used, objective and RMS log residual. `start`: the profile's current values."""
    rows = fit_rows(cases)
    if any(c.system != FIT_SYSTEM for c in cases if c in rows):
        raise AssertionError("a fit row outside h100_sxm")
    if not rows:
        return {}
    best = dict(start)
    score, n = log_objective(rows, best, predict)
    for key, grid in (("step_cpu_fixed_ms", FIXED_GRID_MS),
                      ("step_cpu_per_seq_ms", PER_SEQ_GRID_MS)):
        for value in grid:
            trial = {**best, key: value}
            s, m = log_objective(rows, trial, predict)
            say(f"  {key} = {value:g}: objective {s:.4f} over {m} rows")
            if m == n and s < score:
                best, score = trial, s
    return {**best, "rows": n, "objective": "sum ln(pred/measured TPOT)^2",
            "objective_value": round(score, 6),
            "rms_log_residual": round(math.sqrt(score / n), 6) if n else float("nan"),
            "row_ids": sorted(c.row_id for c in rows)}


def write_fits(fits: dict[str, dict], path: Path = HOST_FITS_PATH) -> None:
    lines = ["# Engine host terms fitted to the h100_sxm rows of aiconfigurator-core 0.12.0's",
             "# systems/silicon_sample.csv (mode agg), greedy closed-loop TPOT; written by",
             "# `python run.py silicon-validate --refit` (src/validation/host_fit.py). The",
             "# h200_sxm / b200_sxm / gb200 rows are the validation and are never fitted to.", ""]
    for engine, fit in sorted(fits.items()):
        lines.append(f'[engines."{engine}"]')
        for key, value in fit.items():
            if isinstance(value, str):
                lines.append(f'{key} = "{value}"')
            elif isinstance(value, list):
                lines.append(f"{key} = [" + ", ".join(f'"{v}"' for v in value) + "]")
            else:
                lines.append(f"{key} = {value!r}")
        lines.append("")
    path.write_text("\n".join(lines))


def read_fits(path: Path = HOST_FITS_PATH) -> dict[str, dict]:
    """engine -> the EngineProfile fields fitted (other keys are the fit's record)."""
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text()).get("engines", {})
    return {e: {k: float(v) for k, v in fit.items() if k.startswith("step_cpu_")}
            for e, fit in data.items()}
