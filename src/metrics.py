"""From per-replication run totals to one results row, with confidence intervals.

Every ratio metric is a ratio of totals over the R independent replications (a ratio estimator),
not a mean of per-replication ratios: speedup = sum of greedy makespans / sum of speculative
makespans, i.e. the throughput ratio on the identical requests. Its confidence interval uses the
delta method for a ratio of means (e.g. Law, "Simulation Modeling and Analysis", 5th ed., 9.5.2):

    R_hat = mean(g) / mean(s),   d_i = g_i - R_hat s_i,
    half-width = t_{n-1, (1+level)/2} * sd(d) / (sqrt(n) * mean(s)).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from src.serving import RunStats


def ratio_ci(numerator: np.ndarray, denominator: np.ndarray, level: float) -> tuple[float, float,
                                                                                    float]:
    """(ratio of sums, CI low, CI high) by the delta method; needs >= 2 replications."""
    n = numerator.size
    ratio = numerator.sum() / denominator.sum()
    residual = numerator - ratio * denominator
    t = stdtrit(n - 1, 0.5 + level / 2)  # Student-t quantile (scipy.special: no scipy.stats import)
    half = t * residual.std(ddof=1) / (np.sqrt(n) * denominator.mean())
    return float(ratio), float(ratio - half), float(ratio + half)


def grid_point_metrics(greedy: RunStats, spec: RunStats, batch_size: int, level: float) -> dict:
    """One results.csv row's measured columns (definitions in design.md, "Metrics"). Every ratio
    metric of the speculative run carries its own delta-method interval (`<metric>_ci_low/high`)."""
    speedup, low, high = ratio_ci(greedy.makespan, spec.makespan, level)
    n_requests = spec.requests * spec.makespan.size
    tokens = spec.committed_tokens.sum()
    row = {"speedup": speedup, "speedup_ci_low": low, "speedup_ci_high": high}
    for name, num, den in (
        ("acceptance_rate", spec.accepted_drafts, spec.proposed_drafts),
        ("tokens_per_step", spec.committed_tokens, spec.active_slot_steps),
        ("slot_utilization", spec.active_slot_steps, batch_size * spec.steps),
        ("divergence_penalty", spec.rejected_draft_time, spec.makespan),
    ):
        row[name], row[f"{name}_ci_low"], row[f"{name}_ci_high"] = ratio_ci(num, den, level)
    return {
        **row,
        "greedy_slot_utilization": greedy.active_slot_steps.sum()
        / (batch_size * greedy.steps.sum()),
        "draft_time_share": spec.draft_time.sum() / spec.makespan.sum(),
        "greedy_throughput_tokens_per_time_unit": greedy.committed_tokens.sum()
        / greedy.makespan.sum(),
        "speculative_throughput_tokens_per_time_unit": tokens / spec.makespan.sum(),
        "greedy_step_time_mean_time_units": greedy.makespan.sum() / greedy.steps.sum(),
        "speculative_step_time_mean_time_units": spec.makespan.sum() / spec.steps.sum(),
        "greedy_latency_mean_time_units": greedy.latency_sum.sum() / n_requests,
        "speculative_latency_mean_time_units": spec.latency_sum.sum() / n_requests,
        "replications": spec.makespan.size,
        "requests": n_requests,
    }


def best_gamma(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The row of highest speedup per group of `by` (the first on ties), with schedule_gamma = its
    gamma, or 0 (speculation off) where no gamma beats greedy (speedup <= 1). Groups sorted."""
    best = df.loc[df.groupby(by, sort=True)["speedup"].idxmax()].copy()
    best["schedule_gamma"] = np.where(best.speedup > 1.0, best.gamma, 0)
    return best
