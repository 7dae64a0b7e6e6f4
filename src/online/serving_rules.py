"""The serving summary's rules: which (policy, rate) is a steady state, the SLO capacity and its
bracket, where speculation stops paying, and how a rate is printed (design.md section 15).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def slower_rates(table: pd.DataFrame, policy: str, key: str = "tpot_p50_speedup") -> list[float]:
    """Every rate at which the policy's speedup CI lies wholly below 1 (speculation significantly
    slower than none there), ascending: a rate between two where it pays counts too, so a faster
    overloaded rate above cannot hide it (summary S2)."""
    t = table[table.policy == policy].sort_values("rate_per_s")
    return [float(r) for r in t.rate_per_s[t[f"{key}_ci_high"] < 1.0]]


# a rate is a steady state when its arrival window is at least this many mean end-to-end
# latencies (design.md, section 15, "Steady state"): the engine fills up and drains within about
# one end-to-end latency, so transients touch about 2 / k of the requests (10% at k = 20); an
# overloaded rate, whose latencies grow with the window, fails the rule however long the window
STEADY_WINDOW_E2E = 20.0


def arrival_window_s(cfg, rate: float) -> float:
    """Seconds over which a replication's requests arrive at `rate` (about requests / rate)."""
    if cfg.duration_s is not None:
        return float(cfg.duration_s)
    if cfg.trace is not None:
        return (len(cfg.trace.arrival_s) - 1) / rate
    return cfg.requests_per_replication / rate


def steady_flags(table: pd.DataFrame, window_s: dict, k: float = STEADY_WINDOW_E2E) -> pd.Series:
    """Per row: True where the rate's arrival window is >= k x the row's mean E2E latency."""
    window = table.rate_per_s.map(window_s).astype(float)
    return window >= k * table.e2e_mean_s


# S5 interpolates a capacity only between two steady rates at most this factor apart: attainment
# falls from "met" to "missed" over a narrow band of rates (a queue's cliff), so across a wider
# bracket the interpolated figure says where the two measured attainments happen to sit, not
# where the cliff is, and a non-steady miss's attainment depends on how long it was overloaded
# (design.md section 15, "SLO capacity"); 1.25 admits the committed run's 32/40/48/56/64 steps
MAX_INTERPOLATION_RATIO = 1.25

MARK = " *"
MARK_LEGEND = (f"* = arrival window < {STEADY_WINDOW_E2E:g}x mean E2E: a burst, not a steady "
               "state")


def rate_label(rate: float) -> str:
    """A rate as printed: an integer or 3 significant figures (a trace's 3.78848 -> 3.79)."""
    if float(rate).is_integer():
        return f"{int(rate)}"
    return f"{rate:.3g}" if rate < 1000 else f"{rate:.0f}"


def slo_capacity(table: pd.DataFrame, policy: str, target: float,
                 steady: pd.Series | None = None,
                 max_ratio: float = MAX_INTERPOLATION_RATIO) -> tuple[str, float, float]:
    """(kind, rate, first miss): the highest rate at which at least `target` of the requests
    meet the SLO, interpolated in log rate between the last rate that meets it and the first
    that misses where both are steady states and at most `max_ratio` apart.

    With `steady` (a flag per table row), a rate that meets the SLO counts only where it is a
    steady state (a burst or an overloaded run's meet says nothing about sustained load); a miss
    counts wherever it is (transients only lower latencies, and an overload's grow with the
    window). kind: "between" (rate interpolated), "bracket" (the capacity lies between `rate`,
    the last meet, and the first miss, which is not steady or more than `max_ratio` higher),
    "above" (met at every counted rate below the first miss up to `rate`, the highest counted
    rate), "below" (missed at the lowest rate, `rate`), "none" (no rate counts: every rate
    before the first miss meets the SLO without being steady); first miss: the lowest rate that
    misses the SLO (nan where none does)."""
    t = table[table.policy == policy].sort_values("rate_per_s")
    rates, att = t.rate_per_s.to_numpy(), t.slo_attainment.to_numpy()
    ok = att >= target
    counted = np.ones(len(rates), bool) if steady is None else steady[t.index].to_numpy()
    miss = np.nonzero(~ok)[0]
    first_bad = int(miss[0]) if miss.size else len(rates)
    first_miss = float(rates[first_bad]) if miss.size else float("nan")
    met = np.nonzero(ok[:first_bad] & counted[:first_bad])[0]
    if first_bad == 0:
        return "below", float(rates[0]), first_miss
    if not met.size:
        return "none", float("nan"), first_miss
    last = int(met[-1])
    if first_bad == len(rates) or last != first_bad - 1:
        return "above", float(rates[last]), first_miss
    r0, r1, a0, a1 = rates[last], rates[first_bad], att[last], att[first_bad]
    if not counted[first_bad] or r1 / r0 > max_ratio:
        return "bracket", float(r0), first_miss
    f = (a0 - target) / (a0 - a1)
    return "between", float(np.exp(np.log(r0) + f * (np.log(r1) - np.log(r0)))), first_miss


def duration_to_steady_s(e2e_mean_s, k: float = STEADY_WINDOW_E2E) -> float:
    """The arrival window (s, rounded up to 10 s) that holds k of the largest measured mean E2E
    latencies: the --duration-s that would make those rates steady, if their latencies hold."""
    return float(np.ceil(k * np.max(e2e_mean_s) / 10.0) * 10.0)


def capacity_text(kind: str, rate: float, first_miss: float, top_rate: float,
                  duration_hint_s: float | None = None) -> str:
    """S5's capacity cell (`duration_hint_s`: the --duration-s that would make the rates that
    meet the SLO without being steady one, said where they leave the capacity open)."""
    if kind == "below":
        return f"< {rate_label(rate)}/s (missed at every rate)"
    upper = ("met at every rate" if np.isnan(first_miss)
             else f"first miss at {rate_label(first_miss)}/s")
    hint = ("" if duration_hint_s is None
            else f"; --duration-s {duration_hint_s:g} would make them steady")
    if kind == "none":
        return f"unknown: the rates that meet it are not steady states ({upper}{hint})"
    if kind == "above" and np.isnan(first_miss):
        return (f"> {rate_label(rate)}/s (met at every rate)" if rate >= top_rate
                else f">= {rate_label(rate)}/s (the highest steady rate that meets it; {upper}"
                f"{hint.replace('them', 'the rates above')})")
    if kind in ("above", "bracket"):  # above: a rate between met the SLO, but not steadily
        return f"{rate_label(rate)}-{rate_label(first_miss)}/s"
    return f"{rate:.1f}/s"



def with_steadiness(table: pd.DataFrame, cfg) -> pd.DataFrame:
    """The table with each row's arrival window and whether it is a steady state (columns
    arrival_window_s, steady_state; see STEADY_WINDOW_E2E)."""
    t = table.copy()
    windows = {r: arrival_window_s(cfg, r) for r in t.rate_per_s.unique()}
    t["arrival_window_s"] = t.rate_per_s.map(windows).astype(float)
    # and at least k requests a replication, so start and drain touch at most ~2 / k of them
    enough = t.requests >= STEADY_WINDOW_E2E * cfg.replications if "requests" in t else True
    t["steady_state"] = steady_flags(t, windows) & enough
    return t
