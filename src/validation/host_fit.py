"""Engine host terms fitted to the H100 rows of silicon_sample.csv only.

Measured kernels leave out an engine's CPU work (scheduling, input preparation, sampling, launch
gaps). Per engine profile, `step_cpu_fixed_ms` a and `step_cpu_per_seq_ms` b (EngineProfile,
src/costmodel/engines.py) are fitted to the greedy TPOT of every runnable h100_sxm row i:

    minimise  sum_i ln(predicted TPOT_i(a, b) / measured TPOT_i)^2,   a, b >= 0

by scipy.optimize.least_squares (trust-region reflective, bounded; b scaled to 10 us so both
coordinates move on one scale), each evaluation one closed-loop serving run per distinct row
(host_eval.PreparedCase: the deployment built once, the simulation re-run). Two structures are
fitted from the same rows (STRUCTURES): `overlapped`, the profiles' own, where asynchronous
scheduling hides the CPU behind the GPU step (step = max(GPU, a + b S)), and `exposed`, where
the same two terms are paid on top of every greedy step (cpu_overlap_decode = false:
step = GPU + a + b S). Draft-pass terms are not identifiable from greedy rows (the CSV has no
speculative rows) and keep the profile's values. Rows of any other system (H200, B200, GB200)
are the validation and never reach `fit_rows`. The result is data: src/presets/host_fits.toml
(write_fits), which the engine profile loader merges over engines.toml
(src/costmodel/presets.py BUILTIN_PRESET_FILES).
"""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np

from src.validation.silicon_rows import FIT_SYSTEM, SiliconCase

HOST_FITS_PATH = Path(__file__).resolve().parents[1] / "presets" / "host_fits.toml"
TERMS = ("step_cpu_fixed_ms", "step_cpu_per_seq_ms")
SCALE = np.array([1.0, 0.01])  # optimiser coordinate -> ms, ms per sequence
# least_squares max_nfev: residual evaluations outside the Jacobian, each of which adds two more
# (2-point differences in a and b): at most 3 x 6 = 18 serving runs per distinct row
MAX_NFEV = 6
# relative objective gain below which a fit (or the second structure) is not taken: the data do
# not tell the terms (or the structures) apart
MIN_GAIN = 0.01
# structure name -> EngineProfile fields held fixed while a and b are fitted
STRUCTURES = {"overlapped": {"cpu_overlap_decode": True}, "exposed": {"cpu_overlap_decode": False}}
SOURCE = ("fitted to {n} h100_sxm rows of aiconfigurator-core 0.12.0 silicon_sample.csv by "
          "`python run.py silicon-validate --refit`")


def fit_rows(cases: list[SiliconCase]) -> list[SiliconCase]:
    """The cases a fit may read: h100_sxm only."""
    return [c for c in cases if c.system == FIT_SYSTEM]


def log_residuals(cases, terms: dict, predict) -> np.ndarray:
    """ln(pred / measured) TPOT per case (nan where the model refuses the row)."""
    out = []
    for c in cases:
        p = predict(c, terms)
        ok = isinstance(p, dict) and p["tpot_ms"] > 0 and c.measured_tpot_ms > 0
        out.append(math.log(p["tpot_ms"] / c.measured_tpot_ms) if ok else math.nan)
    return np.array(out)


def fit_engine(cases: list[SiliconCase], start: dict, predict, say=lambda m: None,
               fixed: dict | None = None) -> dict:
    """Fitted {step_cpu_fixed_ms, step_cpu_per_seq_ms} of one engine from its H100 cases (with
    `fixed` EngineProfile fields held), the rows used, objective and RMS log residual.
    `start`: the profile's current values; `predict(case, terms)` as silicon_serve.predict."""
    from scipy.optimize import least_squares
    rows = fit_rows(cases)
    if any(c.system != FIT_SYSTEM for c in rows):
        raise AssertionError("a fit row outside h100_sxm")
    fixed = dict(fixed or {})
    if not rows:
        return {}
    first = log_residuals(rows, {**start, **fixed}, predict)
    keep = [c for c, r in zip(rows, first) if math.isfinite(r)]
    if not keep:
        return {}

    def terms_of(x) -> dict:
        return {**fixed, **{k: float(v) for k, v in zip(TERMS, np.maximum(x, 0.0) * SCALE)}}

    def residuals(x):
        r = log_residuals(keep, terms_of(x), predict)
        say(f"  {', '.join(f'{k} = {v:.4g}' for k, v in terms_of(x).items())}: "
            f"objective {float(np.nansum(r ** 2)):.4f}")
        return np.nan_to_num(r, nan=0.0)

    x0 = np.array([max(float(start[k]), 0.0) for k in TERMS]) / SCALE
    sol = least_squares(residuals, x0, bounds=(0.0, np.inf), method="trf", diff_step=0.05,
                        max_nfev=MAX_NFEV)
    best = terms_of(sol.x)
    score = float(np.sum(sol.fun ** 2))
    start_score = float(np.sum(first[np.isfinite(first)] ** 2))
    # identified: the terms move the objective by more than MIN_GAIN (where the engine hides
    # its CPU behind the GPU step the greedy rows leave them free, and the profile keeps its own)
    identified = start_score - score > MIN_GAIN * start_score
    if not identified:
        best, score = {**fixed, **{k: float(start[k]) for k in TERMS}}, start_score
    n = len(keep)
    return {**{k: round(v, 6) if isinstance(v, float) else v for k, v in best.items()},
            "rows": n, "source": SOURCE.format(n=n),
            "objective": "sum ln(pred/measured TPOT)^2", "objective_value": round(score, 6),
            "start_objective_value": round(start_score, 6), "identified": identified,
            "rms_log_residual": round(math.sqrt(score / n), 6),
            "evaluations": int(sol.nfev + 2 * (sol.njev or 0)),
            "row_ids": sorted(c.row_id for c in keep)}


def write_fits(fits: dict[str, dict], path: Path = HOST_FITS_PATH, notes: list[str] = (),
               not_adopted: dict[str, str] | None = None) -> None:
    """host_fits.toml: per engine an [engines."<name>"] table of the adopted EngineProfile
    fields (the preset loader merges them over engines.toml), its record as comments. An engine
    of `not_adopted` (engine -> why) is written as comments only: recorded, not merged."""
    not_adopted = not_adopted or {}
    lines = ["# Engine host terms fitted to the h100_sxm rows of aiconfigurator-core 0.12.0's",
             "# systems/silicon_sample.csv (mode agg), greedy closed-loop TPOT; WRITTEN BY",
             "# `python run.py silicon-validate --refit` (src/validation/host_fit.py); rerun it",
             "# instead of editing by hand. The h200_sxm / b200_sxm / gb200 rows are the",
             "# validation and are never fitted to. design.md, \"Engine host terms fitted to the",
             "# H100 rows\".", *[f"# {n}" for n in notes], ""]
    for engine, fit in sorted(fits.items()):
        off = "# " if engine in not_adopted else ""
        lines.append(f'{off}[engines."{engine}"]')
        if off:
            lines.append(f"# not adopted: {not_adopted[engine]}")
        for key, value in fit.items():
            if key in TERMS or key in PROFILE_FIELDS:
                lines.append(f"{off}{key} = {_toml(value)}")
            elif key == "row_ids":
                lines.append(f"# {key}: {len(value)} rows ({', '.join(value[:3])}, ...)")
            else:
                lines.append(f"# {key}: {value}")
        lines.append("")
    path.write_text("\n".join(lines))


PROFILE_FIELDS = ("cpu_overlap_decode",)  # structure fields a fit may set (STRUCTURES)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def not_adopted_of(path: Path = HOST_FITS_PATH) -> dict[str, str]:
    """engine -> why, of the engines a fit file records without merging them (a refit keeps
    these decisions: they were taken on the validation rows, which a refit never reads)."""
    if not path.exists():
        return {}
    out, engine = {}, None
    for line in path.read_text().splitlines():
        if line.startswith('# [engines."'):
            engine = line.split('"')[1]
        elif engine and line.startswith("# not adopted: "):
            out[engine] = line[len("# not adopted: "):]
            engine = None
    return out


def read_fits(path: Path = HOST_FITS_PATH) -> dict[str, dict]:
    """engine -> the EngineProfile fields fitted (the record is in comments)."""
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text()).get("engines", {})
    return {e: {k: v for k, v in fit.items() if k in TERMS or k in PROFILE_FIELDS}
            for e, fit in data.items()}


def own_terms(engine: str) -> dict:
    """The two terms as src/presets/engines.toml gives them (vidur's V0 figures), before any
    host fit is merged: where a refit starts, and what it keeps where the rows leave it free."""
    from src.costmodel.engines import ENGINE_PROFILES_FILE
    table = tomllib.loads(ENGINE_PROFILES_FILE.read_text())["engines"][engine]
    return {k: float(table[k]) for k in TERMS}


def refit(cases: list[SiliconCase], say=lambda m: None) -> dict[str, dict]:
    """engine -> the record of the adopted structure (the profiles' own unless the other's
    objective is lower by MIN_GAIN), fitted from the h100_sxm cases only, each distinct
    deployment prepared once (host_eval)."""
    from src.validation.host_eval import case_key, prepare_cases
    rows = fit_rows(cases)
    runs, refused = prepare_cases(rows, say)
    memo: dict = {}

    def predict(case, terms):
        key = case_key(case)
        if key not in runs:
            return f"model refuses: {refused.get(key, '')}"
        at = (key, tuple(sorted((terms or {}).items())))
        if at not in memo:
            memo[at] = runs[key].predict(terms)
        return memo[at]

    out = {}
    for engine in sorted({c.engine for c in rows}):
        mine = [c for c in rows if c.engine == engine]
        start = own_terms(engine)
        records = {}
        for name, fixed in STRUCTURES.items():
            say(f"fitting {engine}'s host terms ({name}) to {len(mine)} h100_sxm rows")
            records[name] = fit_engine(mine, start, predict, say, fixed)
        first, second = STRUCTURES  # the profiles' own structure unless the other is better
        a, b = (records[s].get("objective_value", math.inf) for s in (first, second))
        best, other = (second, first) if b < a * (1.0 - MIN_GAIN) else (first, second)
        out[engine] = {**records[best], "structure": best,
                       f"{other}_structure_fit": {k: records[other].get(k) for k in
                                                  (*TERMS, "objective_value", "identified")}}
    return out
