"""Per-request acceptance traces: a CSV of request_id, step, proposed, accepted (one row per request
and verification step, as an engine log gives it) -> the workload's empirical acceptance.

The trace is replayed through the model the simulator runs (src/acceptance.py): a shared shape of
per-position conditional rates and a per-request scale on it.

* Per-position rates, pooled over requests (a Kaplan-Meier estimate, so drafts shorter than a
  position do not count against it):
      a_i = #(steps with accepted >= i) / #(steps with accepted >= i-1 and proposed >= i).
* Each request's scale s_r: the request's rates are a_i^s_r, with s_r chosen so that its expected
  accepted tokens over its own steps equal what it accepted:
      sum_t sum_{i <= proposed_t} exp(-s_r C_i) = sum_t accepted_t,   C_i = sum_{j <= i} -ln a_j.
  (Moment matching; the left side falls monotonically in s_r, solved by bisection.) A simulated
  request draws its scale from these, i.e. behaves like a recorded request.
* The i.i.d. fit of the same trace: each request's maximum-likelihood per-token rate under
  i.i.d. acceptance (accepted drafts over accepted drafts plus rejections),
      alpha_r = A_r / (A_r + #(steps of r with accepted < proposed)),
  kept per request so that the comparison isolates the position assumption, not the spread.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pandas as pd

from src.config import ALPHA_CLIP, ConfigError, PerPositionAlpha, read_text_file

OPTION = "--acceptance-trace"
COLUMNS = ("request_id", "step", "proposed", "accepted")


@dataclass(frozen=True)
class TraceFit:
    source: str  # file name
    requests: int
    steps: int
    rates: tuple[float, ...]  # pooled conditional rates a_1..a_P
    scales: tuple[float, ...]  # per-request hazard scale under the per-position model
    iid_alpha: float  # pooled i.i.d. rate (all accepted / (accepted + rejections))
    iid_scales: tuple[float, ...]  # per-request i.i.d. rates, as scales on iid_alpha
    accepted_tokens: int
    proposed_tokens: int

    @property
    def mean_acceptance_length(self) -> float:
        return 1.0 + self.accepted_tokens / self.steps


def read_trace(path: str, option: str = OPTION) -> pd.DataFrame:
    """The trace as integer columns; ConfigError naming the first problem."""
    text = read_text_file(path, option, "a CSV file")
    expected = f"a CSV with header {','.join(COLUMNS)} and one row per request and step"
    if not text.strip():
        raise ConfigError(option, f"{path} is empty; expected {expected}")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ConfigError(option,
                          f"{path} is not valid CSV ({str(e).strip()}); expected "
                          f"{expected}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(option,
                          f"{path} lacks column(s) {', '.join(missing)}; expected {expected}")
    if df.empty:
        raise ConfigError(option, f"{path} has a header but no rows; expected {expected}")
    out = pd.DataFrame({"request_id": df["request_id"].str.strip()})
    if out.request_id.isna().any() or (out.request_id == "").any():
        row = int(np.flatnonzero(out.request_id.isna() | (out.request_id == ""))[0]) + 2
        raise ConfigError(option,
                          f"{path} line {row}: empty request_id; expected an id on every row")
    for col, low in (("step", 0), ("proposed", 1), ("accepted", 0)):
        values = pd.to_numeric(df[col].str.strip(), errors="coerce")
        bad = values.isna() | (values != np.floor(values)) | (values < low)
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ConfigError(option,
                              f"{path} line {row + 2}: {col} = {df[col].iloc[row]!r}; expected an "
                                      f"integer >= {low}")
        out[col] = values.astype(np.int64)
    over = out.accepted > out.proposed
    if over.any():
        row = int(np.flatnonzero(over.to_numpy())[0])
        raise ConfigError(option,
                          f"{path} line {row + 2}: accepted {out.accepted.iloc[row]} > proposed "
                                  f"{out.proposed.iloc[row]}; expected 0 <= accepted <= proposed")
    dup = out.duplicated(["request_id", "step"])
    if dup.any():
        row = int(np.flatnonzero(dup.to_numpy())[0])
        raise ConfigError(option,
                          f"{path} line {row + 2}: request {out.request_id.iloc[row]!r} step "
                                  f"{out.step.iloc[row]} appears twice; expected one row per "
                                  "request and step")
    return out


def pooled_rates(proposed: np.ndarray, accepted: np.ndarray, source: str,
                 option: str = OPTION) -> tuple[float, ...]:
    """a_i = #(accepted >= i) / #(accepted >= i-1 and proposed >= i), i = 1..max proposed
    reached."""
    rates = []
    for i in range(1, int(proposed.max()) + 1):
        reached = np.count_nonzero((accepted >= i - 1) & (proposed >= i))
        if reached == 0:
            break
        passed = np.count_nonzero(accepted >= i)
        if passed == 0:
            raise ConfigError(option,
                              f"{source}: none of the {reached} drafts that reached position {i} "
                                      "had it accepted (rate 0); expected rates in (0, 1] (a "
                                      "longer trace)")
        rates.append(passed / reached)
    if all(a == 1.0 for a in rates):
        raise ConfigError(option,
                          f"{source}: every proposed draft token was accepted; expected at least "
                                  "one rejection")
    return tuple(rates)


def fit_scales(reach_counts: np.ndarray, accepted_totals: np.ndarray, cumulative_hazard: np.ndarray,
               scale_bounds: tuple[float, float], iterations: int = 80) -> np.ndarray:
    """Per-request s with sum_i reach_counts[r, i] exp(-s C_i) = accepted_totals[r] (bisection in
    ln s).

    reach_counts[r, i] = steps of request r that proposed at least i + 1 tokens. Requests outside
    the bounds' range (all accepted, none accepted) get the bound.
    """
    lo = np.full(accepted_totals.shape, np.log(scale_bounds[0]))
    hi = np.full(accepted_totals.shape, np.log(scale_bounds[1]))
    for _ in range(iterations):
        mid = (lo + hi) / 2
        expected = (reach_counts * np.exp(-np.exp(mid)[:, None] * cumulative_hazard)).sum(axis=1)
        too_many = expected > accepted_totals  # expectation too high -> scale (hazard) must grow
        lo = np.where(too_many, mid, lo)
        hi = np.where(too_many, hi, mid)
    return np.exp((lo + hi) / 2)


def fit_trace(df: pd.DataFrame, source: str, option: str = OPTION) -> TraceFit:
    proposed = df.proposed.to_numpy()
    accepted = df.accepted.to_numpy()
    rates = pooled_rates(proposed, accepted, source, option)
    positions = len(rates)
    hazard = -np.log(np.asarray(rates))
    cumulative = np.cumsum(hazard)
    mean_h = cumulative[-1] / positions
    codes, ids = pd.factorize(df.request_id)
    n = len(ids)
    # steps of each request that proposed >= i tokens, i = 1..positions (deeper ones reuse nothing:
    # no step reached them)
    reach = np.zeros((n, positions))
    capped = np.minimum(proposed, positions)
    np.add.at(reach, (codes, capped - 1), 1.0)
    reach = np.cumsum(reach[:, ::-1], axis=1)[:, ::-1]
    accepted_totals = np.bincount(codes, weights=np.minimum(accepted, positions), minlength=n)
    # scale bounds: the request's representative rate exp(-s Cbar) within the simulator's clip
    bounds = (-np.log(ALPHA_CLIP[1]) / mean_h, -np.log(ALPHA_CLIP[0]) / mean_h)
    scales = fit_scales(reach, accepted_totals, cumulative, bounds)
    rejections = np.bincount(codes, weights=(accepted < proposed).astype(float), minlength=n)
    all_accepted = np.bincount(codes, weights=accepted.astype(float), minlength=n)
    iid_alpha = float(all_accepted.sum() / (all_accepted.sum() + rejections.sum()))
    per_request = np.clip(all_accepted / np.maximum(all_accepted + rejections, 1), *ALPHA_CLIP)
    iid_scales = np.log(per_request) / np.log(iid_alpha)
    return TraceFit(source=source, requests=n, steps=len(df), rates=rates,
                    scales=tuple(float(s) for s in scales), iid_alpha=iid_alpha,
                    iid_scales=tuple(float(s) for s in iid_scales),
                    accepted_tokens=int(accepted.sum()), proposed_tokens=int(proposed.sum()))


def load_trace(path: str, option: str = OPTION) -> TraceFit:
    return fit_trace(read_trace(path, option), path, option)


def describe(fit: TraceFit) -> list[str]:
    s = np.asarray(fit.scales)
    a = np.asarray(fit.iid_alpha) ** np.asarray(fit.iid_scales)
    q = np.percentile
    rates = ", ".join(f"a{i + 1}={r:.3f}" for i, r in enumerate(fit.rates))
    return [
        (f"acceptance trace {fit.source}: {fit.requests} requests, {fit.steps} steps, "
         f"{fit.proposed_tokens} draft tokens proposed, {fit.accepted_tokens} accepted"),
        (f"  mean acceptance length (1 + accepted/steps) {fit.mean_acceptance_length:.3f}, "
         f"draft acceptance rate {fit.accepted_tokens / fit.proposed_tokens:.3f}"),
        f"  per-position conditional rates a_i (pooled): {rates}",
        f"  per-request scale on them: median {np.median(s):.2f}, 10-90% "
        f"{q(s, 10):.2f}..{q(s, 90):.2f}",
        (f"  i.i.d. fit of the same trace: pooled alpha {fit.iid_alpha:.3f}, per-request alpha "
         f"10-90% {q(a, 10):.3f}..{q(a, 90):.3f}"),
    ]


def to_modes(fit: TraceFit, name: str = "trace_per_position",
             iid_name: str = "trace_iid") -> dict[str, PerPositionAlpha]:
    """{name: per-position replay, iid_name: the i.i.d. fit of the same trace}."""
    base = f"trace {fit.source} ({fit.requests} requests, {fit.steps} steps)"
    return {
        name: PerPositionAlpha(rates=fit.rates, scales=fit.scales, compare_with=iid_name,
                               source=f"{base}: pooled per-position rates, per-request scales"),
        iid_name: PerPositionAlpha(rates=(fit.iid_alpha,), scales=fit.iid_scales,
                                   source=f"{base}: per-request i.i.d. fit"),
    }
